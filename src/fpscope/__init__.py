"""fpscope: reveal and reproduce the floating-point accumulation order and arithmetic of kernels."""

__version__ = "0.1.0"
