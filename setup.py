"""The relay's C extension for plain content (gateway/fast_forward.py, issue 35), compiled by ``pip install .`` with
the system's C compiler; everything else about the project is in pyproject.toml. Optional: where it cannot be compiled
(no compiler), the install goes on without it and the gateway relays every piece in Python (``make venv`` says so)."""

from setuptools import Extension, setup

native_relay = Extension(
    "hearth_fast_forward", ["gateway/native/fast_forward.c"], extra_compile_args=["-O2"], optional=True
)
setup(ext_modules=[native_relay])
