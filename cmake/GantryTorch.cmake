# libtorch from the PyPI `torch` wheel (or any libtorch 2.x on
# CMAKE_PREFIX_PATH). Only gantry_torch, executors and gantry-worker use it.
# The Python that has the wheel: GANTRY_PYTHON, else the project venv made by
# scripts/setup.sh ($GANTRY_VENV or <source>/.venv), else python3 on PATH.
set(GANTRY_PYTHON "" CACHE FILEPATH
  "Python whose torch wheel provides libtorch (default: the venv of scripts/setup.sh)")
if(NOT Torch_DIR)
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
# Name the GPU architectures, or torch's CMake probes for a GPU with try_run,
# which fails on machines without one (and under C++20 dialect settings).
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
endif()
find_package(Torch REQUIRED)
# The wheel's libtorch_cuda.so needs the NCCL/cuDNN/... of the `nvidia-*`
# wheels beside it; the linker must look there, not in /usr/local/cuda.
get_filename_component(_gantry_site "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
file(GLOB _gantry_nvidia_libs LIST_DIRECTORIES true "${_gantry_site}/nvidia/*/lib")
set(GANTRY_TORCH_LINK_OPTIONS "")
foreach(dir IN LISTS _gantry_nvidia_libs)
  list(APPEND GANTRY_TORCH_LINK_OPTIONS "LINKER:-rpath-link,${dir}")
endforeach()
# One imported target so that torch's include path is SYSTEM and reaches only
# what links it.
add_library(gantry_libtorch INTERFACE)
target_link_libraries(gantry_libtorch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(gantry_libtorch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
target_link_options(gantry_libtorch INTERFACE ${GANTRY_TORCH_LINK_OPTIONS})
