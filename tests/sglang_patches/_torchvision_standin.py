"""Import-only stand-in for torchvision, used only where the real package cannot load.

PyPI's torchvision wheels link libtorch_cuda, which the CPU torch build lacks, so the
real package cannot load there. SGLang and transformers import torchvision names at
module import time (decode_jpeg, ImageReadMode, transforms); none of the code these
tests exercise calls them. Every attribute of the stand-in is an inert placeholder
that raises if actually called.
"""

import importlib.abc
import importlib.machinery
import sys
import types


class _AnyMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _make(name)

    def __call__(cls, *args, **kwargs):
        raise RuntimeError(f"torchvision stand-in: {cls.__name__} is not usable in CPU tests")


def _make(name):
    return _AnyMeta(name, (), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _make(name)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _StubModule(spec.name)
        mod.__path__ = []
        mod.__version__ = "0.0.0+stub"
        return mod

    def exec_module(self, module):
        pass


def install():
    try:
        import torchvision  # noqa: F401

        return False
    except Exception:
        for k in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
            del sys.modules[k]
    sys.meta_path.insert(0, _Finder())
    # transformers caches "is torchvision available?" (lru_cache); if something imported and asked
    # before the stand-in existed, forget the cached False so SGLang's image-processor registration
    # (which transformers gates on torchvision) sees the stand-in.
    tiu = sys.modules.get("transformers.utils.import_utils")
    if tiu is not None:
        for name in dir(tiu):
            fn = getattr(tiu, name)
            if "torchvision" in name and hasattr(fn, "cache_clear"):
                fn.cache_clear()
    return True
