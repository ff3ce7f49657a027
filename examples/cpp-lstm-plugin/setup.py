"""Builds the C++ extension (cpp_lstm_plugin._C) with PyTorch's own build helper; the rest
of the package is in pyproject.toml."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    ext_modules=[CppExtension("cpp_lstm_plugin._C", ["cpp_lstm_plugin/lstm.cpp"],
                              extra_compile_args=["-O2"])],
    cmdclass={"build_ext": BuildExtension},
)
