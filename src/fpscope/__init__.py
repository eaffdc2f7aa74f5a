"""fpscope: reveal and reproduce the floating-point accumulation order and arithmetic of kernels.

The Python API (:mod:`fpscope.api`; README "Python API")::

    import fpscope
    r = fpscope.reveal("numpy.sum", n=1024)            # or any Python callable, n=...
    print(r.summary); r.tree; r.arithmetic; r.record; r.save("sum.json")
    fpscope.verify("sum.json"); fpscope.gate("sum.json").passed
    fpscope.diff("a.json", "b.json").same
    fpscope.probe("sim:hopper-fp16", "fp16"); fpscope.fit("recordings/h100")
    fpscope.emulate.matmul(A, B, profile="hopper-fp16")
    fpscope.load_record("sum.json"); fpscope.load_profile("h100.json")

Everything is imported on first use, so ``import fpscope`` stays light. The functions ``reveal``,
``verify``, ``fit``, ``diff`` and ``gate`` share their names with modules of this package: each
name at the package top is a :class:`_Command`, which calls the API function and reads (and
sets) attributes of the module, so ``fpscope.diff(a, b)``, ``fpscope.diff.DiffError``,
``import fpscope.gate as g; g.target_from_record`` and ``from fpscope.diff import DiffError``
all work.
"""

import sys as _sys
import types as _types

__version__ = "0.1.0"

#: public name -> (module, attribute); None: the module itself
_EXPORTS = {
    "reveal": (".api", "reveal"),
    "verify": (".api", "verify"),
    "probe": (".api", "probe"),
    "fit": (".api", "fit"),
    "diff": (".api", "diff"),
    "gate": (".api", "gate"),
    "load_record": (".api", "load_record"),
    "Revelation": (".api", "Revelation"),
    "load_profile": (".profile", "load_profile"),
    "Profile": (".profile", "Profile"),
    "make_target": (".targets", "make_target"),
    "list_targets": (".targets", "list_targets"),
    "Target": (".targets", "Target"),
    "TargetError": (".targets", "TargetError"),
    "batched": (".targets.callable", "batched"),
    "SumTree": (".tree", "SumTree"),
    "Arithmetic": (".arithmetic", "Arithmetic"),
    "RevealError": (".reveal.prober", "RevealError"),
    "emulate": (".emulate", None),
}

__all__ = sorted(_EXPORTS)


#: API functions whose names are also modules of the package
_COMMANDS = {"reveal": "fpscope.reveal", "verify": "fpscope.verify", "fit": "fpscope.fit",
             "diff": "fpscope.diff", "gate": "fpscope.gate"}


class _Command:
    """An API function (:mod:`fpscope.api`) that is also the module of the same name: calling
    it calls the function; attributes are the module's (read, set and deleted there)."""

    def __init__(self, func, module: str):
        import functools

        object.__setattr__(self, "_func", func)
        object.__setattr__(self, "_module_name", module)
        functools.update_wrapper(self, func)  # __doc__, __name__, __wrapped__ (signature)

    def __call__(self, *args, **kwargs):
        return self._func(*args, **kwargs)

    def _module(self):
        import importlib

        return importlib.import_module(self._module_name)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(self._module(), name)

    def __setattr__(self, name, value):
        if name in ("__doc__", "__name__", "__qualname__", "__module__", "__wrapped__",
                    "__dict__", "__annotations__", "__type_params__"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._module(), name, value)

    def __delattr__(self, name):
        delattr(self._module(), name)

    def __dir__(self):
        return sorted(set(dir(self._module())))

    def __repr__(self):
        return f"<fpscope.{self._func.__name__}: the function fpscope.api.{self._func.__name__}" \
               f" and the module {self._module_name}>"


class _Package(_types.ModuleType):
    """The package's module type: importing the submodule ``fpscope.diff`` (and fit, gate,
    verify, reveal) must not replace the function of the same name at the package top."""

    def __setattr__(self, name, value):
        if isinstance(value, _types.ModuleType) and name in _EXPORTS \
                and _EXPORTS[name][1] is not None:
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, attr = _EXPORTS[name]
    mod = importlib.import_module(module, __name__)
    value = mod if attr is None else getattr(mod, attr)
    if name in _COMMANDS:
        value = _Command(value, _COMMANDS[name])
    globals()[name] = value  # cached: later lookups do not come here
    return value


def __dir__():
    return sorted([*globals(), *_EXPORTS])
