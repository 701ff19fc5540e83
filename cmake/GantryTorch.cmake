# libtorch from the PyPI `torch` wheel (or any libtorch 2.x on
# CMAKE_PREFIX_PATH). Only gantry_torch, executors and gantry-worker use it.
if(NOT Torch_DIR)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _gantry_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _gantry_torch_rc ERROR_QUIET)
    if(_gantry_torch_rc EQUAL 0)
      list(APPEND CMAKE_PREFIX_PATH ${_gantry_torch_prefix})
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
