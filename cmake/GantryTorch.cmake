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
if(NOT GANTRY_TORCH_ROOT)
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
  if(_gantry_python AND NOT Torch_DIR)
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
# The wheel's libraries are used directly, and only libtorch_cpu and c10 are
# linked: libtorch_cuda and the CUDA libraries behind it (about 260 MB of a
# process's memory) are loaded at run time by the worker that is given a CUDA
# device (gantry::LoadTorchCuda, gantry/torch_cuda.h), so a replica on the
# CPU maps none of them and CUDA still works wherever a driver is present.
# torch's CMake package (TorchConfig) links them all into every program and
# insists on a CUDA toolkit when the wheel is a CUDA build: it is used only
# for code compiled with GANTRY_WITH_CUDA (CUDA headers and nvcc), or when
# asked for (ON, with Torch_DIR for a libtorch that no Python has).
#   GANTRY_TORCH_CMAKE_PACKAGE: AUTO (TorchConfig with GANTRY_WITH_CUDA), ON, OFF
set(GANTRY_TORCH_CMAKE_PACKAGE AUTO CACHE STRING
  "Use torch's CMake package (ON), the wheel's libraries directly (OFF), or ON with GANTRY_WITH_CUDA (AUTO)")
find_program(GANTRY_NVCC nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda PATH_SUFFIXES bin)
if(GANTRY_TORCH_ROOT)
  set(_gantry_use_torch_config OFF)
elseif(GANTRY_TORCH_CMAKE_PACKAGE STREQUAL "AUTO")
  if(GANTRY_WITH_CUDA AND GANTRY_NVCC)
    set(_gantry_use_torch_config ON)
  else()
    set(_gantry_use_torch_config OFF)
  endif()
else()
  set(_gantry_use_torch_config ${GANTRY_TORCH_CMAKE_PACKAGE})
endif()

# gantry_libtorch: libtorch's usage requirements (cmake/GantryLibtorch.cmake),
# build-tree only. The install exports it as an empty Gantry::libtorch that
# the installed GantryConfig.cmake fills from the consumer's torch, by the
# same functions, defaulting to the folder recorded here
# (GANTRY_TORCH_USED_ROOT, GANTRY_TORCH_USED_ABI, GANTRY_TORCH_USED_CUDA).
include(GantryLibtorch)
add_library(gantry_libtorch INTERFACE)
if(_gantry_use_torch_config)
  # Name the GPU architectures, or torch's CMake probes for a GPU with
  # try_run, which fails on machines without one (and under C++20).
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
  endif()
  find_package(Torch REQUIRED)
  set(_gantry_torch_root "${TORCH_INSTALL_PREFIX}")
  gantry_libtorch_from_package(gantry_libtorch BUILD_ONLY)
  set(GANTRY_TORCH_USED_ABI 1)
  if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=([01])")
    set(GANTRY_TORCH_USED_ABI ${CMAKE_MATCH_1})
  endif()
  set(GANTRY_TORCH_USED_CUDA ON)
else()
  if(GANTRY_WITH_CUDA)
    message(FATAL_ERROR "GANTRY_WITH_CUDA=ON needs the CUDA toolkit (nvcc); none was found")
  endif()
  if(GANTRY_TORCH_ROOT)
    # Wheels of torch 2.x on PyPI are built with the C++11 ABI.
    set(_gantry_torch_facts "${GANTRY_TORCH_ROOT};1")
  elseif(NOT _gantry_python)
    message(FATAL_ERROR "no Python with the torch wheel: run scripts/setup.sh or set GANTRY_PYTHON "
                        "(or GANTRY_TORCH_ROOT, or GANTRY_TORCH_CMAKE_PACKAGE=ON with Torch_DIR)")
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
  # ON links libtorch_cuda at start-up, as torch's package does, instead of
  # loading it for a CUDA device only.
  option(GANTRY_LINK_TORCH_CUDA
         "Link the wheel's libtorch_cuda at start-up (default: loaded for a CUDA device only)" OFF)
  message(STATUS "libtorch: the wheel's libraries in ${_gantry_torch_root} (libtorch_cpu and "
                 "c10 linked; libtorch_cuda linked at start: ${GANTRY_LINK_TORCH_CUDA}, else loaded "
                 "at run time for a CUDA device)")
  set(_gantry_link_cuda "")
  if(GANTRY_LINK_TORCH_CUDA)
    set(_gantry_link_cuda LINK_CUDA)
  endif()
  gantry_libtorch_from_root(gantry_libtorch ROOT "${_gantry_torch_root}" ABI ${_gantry_torch_abi}
                            ${_gantry_link_cuda} BUILD_ONLY)
  set(GANTRY_TORCH_USED_ABI ${_gantry_torch_abi})
  set(GANTRY_TORCH_USED_CUDA ${GANTRY_LINK_TORCH_CUDA})
endif()
set(GANTRY_TORCH_USED_ROOT "${_gantry_torch_root}")
# Installed programs that link libtorch look for it here. CMake's
# INSTALL_RPATH_USE_LINK_PATH leaves out directories inside the source tree,
# and the project venv (.venv) is one, so the directory is named explicitly.
set(GANTRY_TORCH_LIBRARY_DIR "${_gantry_torch_root}/lib")
