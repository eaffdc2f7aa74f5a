"""fpscope: reveal and reproduce the floating-point accumulation order and arithmetic of kernels."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # lazy, so that "import fpscope" stays light: fpscope.batched, the decorator that declares a
    # user function batched (fpscope.targets.callable.batched)
    if name == "batched":
        from .targets.callable import batched

        return batched
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), "batched"])
