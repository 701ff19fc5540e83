# libtorch from the PyPI `torch` wheel (or any libtorch 2.x on
# CMAKE_PREFIX_PATH). Only gantry_torch, executors and gantry-worker use it.
# The Python that has the wheel: GANTRY_PYTHON, else the project venv made by
# scripts/setup.sh ($GANTRY_VENV or <source>/.venv), else python3 on PATH.
set(GANTRY_PYTHON "" CACHE FILEPATH
  "Python whose torch wheel provides libtorch (default: the venv of scripts/setup.sh)")
# GANTRY_TORCH_ROOT names the wheel's torch folder outright, for a wheel that
# Python cannot import (installed without its nvidia-* dependencies, as the
# CPU container image does); it implies GANTRY_TORCH_CMAKE_PACKAGE=OFF.
set(GANTRY_TORCH_ROOT "" CACHE PATH
  "The torch wheel's folder (site-packages/torch), used without asking Python")
if(NOT Torch_DIR AND NOT GANTRY_TORCH_ROOT)
  set(_gantry_python "${GANTRY_PYTHON}")
  if(NOT _gantry_python AND DEFINED ENV{GANTRY_VENV} AND EXISTS "$ENV{GANTRY_VENV}/bin/python")
    set(_gantry_python "$ENV{GANTRY_VENV}/bin/python")
  endif()
  if(NOT _gantry_python AND EXISTS "${PROJECT_SOURCE_DIR}/.venv/bin/python")
    set(_gantry_python "${PROJECT_SOURCE_DIR}/.venv/bin/python")
  endif()
  if(NOT _gantry_python)
    find_package(Python3 COMPONENTS Interpreter)
    set(_gantry_python "${Python3_EXECUTABLE}")
  endif()
  if(_gantry_python)
    execute_process(
      COMMAND ${_gantry_python} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _gantry_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _gantry_torch_rc ERROR_QUIET)
    if(_gantry_torch_rc EQUAL 0)
      list(APPEND CMAKE_PREFIX_PATH ${_gantry_torch_prefix})
    else()
      message(WARNING "${_gantry_python} has no torch: run scripts/setup.sh "
                      "(or set GANTRY_PYTHON / Torch_DIR)")
    endif()
  endif()
endif()
# torch's CMake package (TorchConfig) insists on a CUDA toolkit when the wheel
# is a CUDA build, and a stock Debian machine has none: there, the wheel's
# libraries are used directly. libtorch_cuda is linked all the same, so CUDA
# works at run time wherever a driver is present; only code compiled with
# GANTRY_WITH_CUDA (CUDA headers and nvcc) needs the toolkit.
#   GANTRY_TORCH_CMAKE_PACKAGE: AUTO (TorchConfig when nvcc is found), ON, OFF
set(GANTRY_TORCH_CMAKE_PACKAGE AUTO CACHE STRING
  "Use torch's CMake package (ON), the wheel's libraries directly (OFF), or ON when nvcc is found (AUTO)")
find_program(GANTRY_NVCC nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda PATH_SUFFIXES bin)
if(GANTRY_TORCH_ROOT)
  set(_gantry_use_torch_config OFF)
elseif(GANTRY_TORCH_CMAKE_PACKAGE STREQUAL "AUTO")
  if(GANTRY_NVCC OR Torch_DIR)
    set(_gantry_use_torch_config ON)
  else()
    set(_gantry_use_torch_config OFF)
  endif()
else()
  set(_gantry_use_torch_config ${GANTRY_TORCH_CMAKE_PACKAGE})
endif()

add_library(gantry_libtorch INTERFACE)
if(_gantry_use_torch_config)
  # Name the GPU architectures, or torch's CMake probes for a GPU with
  # try_run, which fails on machines without one (and under C++20).
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
  endif()
  find_package(Torch REQUIRED)
  set(_gantry_torch_root "${TORCH_INSTALL_PREFIX}")
  target_link_libraries(gantry_libtorch INTERFACE ${TORCH_LIBRARIES})
  target_include_directories(gantry_libtorch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
else()
  if(GANTRY_WITH_CUDA)
    message(FATAL_ERROR "GANTRY_WITH_CUDA=ON needs the CUDA toolkit (nvcc); none was found")
  endif()
  if(GANTRY_TORCH_ROOT)
    # Wheels of torch 2.x on PyPI are built with the C++11 ABI.
    set(_gantry_torch_facts "${GANTRY_TORCH_ROOT};1")
  elseif(NOT _gantry_python)
    message(FATAL_ERROR "no Python with the torch wheel: run scripts/setup.sh or set GANTRY_PYTHON")
  else()
    execute_process(
      COMMAND ${_gantry_python} -c
        "import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
      OUTPUT_VARIABLE _gantry_torch_facts OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _gantry_torch_rc)
    if(NOT _gantry_torch_rc EQUAL 0)
      message(FATAL_ERROR "${_gantry_python} cannot import torch: run scripts/setup.sh")
    endif()
    string(REPLACE "\n" ";" _gantry_torch_facts "${_gantry_torch_facts}")
  endif()
  list(GET _gantry_torch_facts 0 _gantry_torch_root)
  list(GET _gantry_torch_facts 1 _gantry_torch_abi)
  message(STATUS "libtorch: the wheel's libraries in ${_gantry_torch_root} (no CUDA toolkit found, "
                 "so not torch's CMake package; GPU use at run time is unaffected)")
  target_include_directories(gantry_libtorch SYSTEM INTERFACE
    ${_gantry_torch_root}/include ${_gantry_torch_root}/include/torch/csrc/api/include)
  target_compile_definitions(gantry_libtorch INTERFACE _GLIBCXX_USE_CXX11_ABI=${_gantry_torch_abi})
  # As TorchConfig does: libtorch_cuda registers the CUDA backend from its
  # static initialisers, so it must stay linked though no symbol is used.
  # OFF makes a CPU-only program that loads none of the wheel's CUDA
  # libraries (the CPU container image, docker/Dockerfile); libtorch.so is
  # left out then too, as it is only a stub that needs libtorch_cuda.
  option(GANTRY_LINK_TORCH_CUDA "Link the wheel's libtorch_cuda (GPU use at run time)" ON)
  set(_gantry_torch_libs ${_gantry_torch_root}/lib/libtorch_cpu.so ${_gantry_torch_root}/lib/libc10.so)
  if(GANTRY_LINK_TORCH_CUDA)
    list(PREPEND _gantry_torch_libs ${_gantry_torch_root}/lib/libtorch.so)
  endif()
  foreach(lib torch_cuda c10_cuda)
    if(GANTRY_LINK_TORCH_CUDA AND EXISTS ${_gantry_torch_root}/lib/lib${lib}.so)
      list(APPEND _gantry_torch_libs
        "-Wl,--no-as-needed,${_gantry_torch_root}/lib/lib${lib}.so,--as-needed")
    endif()
  endforeach()
  target_link_libraries(gantry_libtorch INTERFACE ${_gantry_torch_libs})
  target_link_options(gantry_libtorch INTERFACE "LINKER:-rpath,${_gantry_torch_root}/lib")
endif()
# The wheel's libtorch_cuda.so needs the NCCL/cuDNN/... of the `nvidia-*`
# wheels beside it; the linker must look there, not in /usr/local/cuda.
get_filename_component(_gantry_site "${_gantry_torch_root}/.." ABSOLUTE)
file(GLOB _gantry_nvidia_libs LIST_DIRECTORIES true "${_gantry_site}/nvidia/*/lib")
foreach(dir IN LISTS _gantry_nvidia_libs)
  target_link_options(gantry_libtorch INTERFACE "LINKER:-rpath-link,${dir}")
endforeach()
# Installed programs that link libtorch look for it here. CMake's
# INSTALL_RPATH_USE_LINK_PATH leaves out directories inside the source tree,
# and the project venv (.venv) is one, so the directory is named explicitly.
set(GANTRY_TORCH_LIBRARY_DIR "${_gantry_torch_root}/lib")
