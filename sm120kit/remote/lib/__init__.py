"""The hosts' side library: stdlib-only modules the remote scripts import.

Like Ansible's module_utils, a module here travels with each script that imports it: the
controller bundles the script with the modules it needs (`sm120kit.remote.script_bundle`) into
the one program fed to ``python3 -`` on stdin, so a remote script still costs one command and
the host needs nothing installed. Modules here import only the standard library and each other
(as ``sm120kit.remote.lib.<name>``), and run on any Python >= 3.8.
"""
