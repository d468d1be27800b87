"""Packages as data: one descriptor type (``base``) for the kernel packages the tool builds (one
module each: ``sgl_kernel``, ``flash_attn``, ``torch_ext``) and the serving stack's packages it
only installs from releases (``released``: descriptors that do not build), the registry the
ops ask by any published name (``registry``), and what smoke is told about them from the
release catalogues (``stack``).

Adding a package is one descriptor plus its recipe entries; nothing outside this package
names a kernel package.
"""
