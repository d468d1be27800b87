"""sm120kit: provision CUDA kernel builds for NVIDIA Blackwell SM120 hosts over SSH."""

__version__ = "0.1.0"
