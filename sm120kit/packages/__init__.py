"""Kernel packages as data: one descriptor module per package (``sgl_kernel``, ``flash_attn``,
``torch_ext``), the descriptor type (``base``) and the registry the ops ask (``registry``).

Adding a package is one descriptor plus its recipe entries; nothing outside this package
names a kernel package.
"""
