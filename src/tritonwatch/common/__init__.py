"""Helpers every layer may use and that know no layer.

TLS settings, listening addresses, KServe paths, logging, terminal tables, command-line
flag helpers, libc and allocator settings, file stamps.
"""
