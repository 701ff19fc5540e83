# libtorch's usage requirements on an INTERFACE target: include dirs,
# _GLIBCXX_USE_CXX11_ABI, the libraries, the rpath. One definition for two
# users, so that code built against the installed package sees the same
# libtorch, the same way, as Gantry's own build did:
#   - Gantry's build (cmake/GantryTorch.cmake) fills gantry_libtorch with
#     BUILD_ONLY: every requirement is wrapped in $<BUILD_INTERFACE:...>, so
#     the exported Gantry::libtorch carries no absolute path of the build
#     machine;
#   - the installed GantryConfig.cmake (this file is installed beside it)
#     fills the imported Gantry::libtorch from the torch the consumer names,
#     else the one recorded at build time.
#
#   gantry_libtorch_from_root(<target> ROOT <torch dir> ABI <0|1> [LINK_CUDA] [BUILD_ONLY])
#     libtorch used directly from a torch folder: the PyPI wheel's
#     site-packages/torch, or an unpacked libtorch archive (same layout).
#   gantry_libtorch_from_package(<target> [BUILD_ONLY])
#     after find_package(Torch): torch's own CMake package (TORCH_LIBRARIES,
#     TORCH_INCLUDE_DIRS; its `torch` target carries the ABI flag).
include_guard(GLOBAL)

# Prefixes each item of ${ARGN} with $<BUILD_INTERFACE:...> if `build_only`.
function(_gantry_libtorch_wrap out build_only)
  set(items "")
  foreach(item IN LISTS ARGN)
    if(build_only)
      list(APPEND items "$<BUILD_INTERFACE:${item}>")
    else()
      list(APPEND items "${item}")
    endif()
  endforeach()
  set(${out} "${items}" PARENT_SCOPE)
endfunction()

# What both ways share: the linker options.
function(_gantry_libtorch_link_options target root build_only)
  # DT_RPATH instead of DT_RUNPATH: an executable's DT_RPATH also serves the
  # libraries that are dlopen'ed later, such as the model library an
  # AOTInductor package loads, which needs libtorch.so and names no path of
  # its own (docs: exported models). DT_RUNPATH only serves the executable's
  # own direct dependencies. The cost: LD_LIBRARY_PATH no longer overrides
  # the directories named here.
  set(options "LINKER:--disable-new-dtags")
  # The wheel's libtorch_cuda.so needs the NCCL/cuDNN/... of the `nvidia-*`
  # wheels beside it; the linker must look there, not in /usr/local/cuda.
  get_filename_component(site "${root}/.." ABSOLUTE)
  file(GLOB nvidia_libs LIST_DIRECTORIES true "${site}/nvidia/*/lib")
  foreach(dir IN LISTS nvidia_libs)
    list(APPEND options "LINKER:-rpath-link,${dir}")
  endforeach()
  _gantry_libtorch_wrap(options ${build_only} ${options})
  target_link_options(${target} INTERFACE ${options})
endfunction()

function(gantry_libtorch_from_root target)
  cmake_parse_arguments(ARG "LINK_CUDA;BUILD_ONLY" "ROOT;ABI" "" ${ARGN})
  set(root "${ARG_ROOT}")
  _gantry_libtorch_wrap(includes ${ARG_BUILD_ONLY}
    ${root}/include ${root}/include/torch/csrc/api/include)
  target_include_directories(${target} SYSTEM INTERFACE ${includes})
  _gantry_libtorch_wrap(defines ${ARG_BUILD_ONLY} _GLIBCXX_USE_CXX11_ABI=${ARG_ABI})
  target_compile_definitions(${target} INTERFACE ${defines})
  # As TorchConfig does: libtorch_cuda registers the CUDA backend from its
  # static initialisers, so it must stay linked though no symbol is used.
  # Without LINK_CUDA, a CPU-only program that loads none of the wheel's
  # CUDA libraries; libtorch.so is left out then too, as it is only a stub
  # that needs libtorch_cuda.
  set(libs ${root}/lib/libtorch_cpu.so ${root}/lib/libc10.so)
  if(ARG_LINK_CUDA)
    list(PREPEND libs ${root}/lib/libtorch.so)
    foreach(lib torch_cuda c10_cuda)
      if(EXISTS ${root}/lib/lib${lib}.so)
        list(APPEND libs "-Wl,--no-as-needed,${root}/lib/lib${lib}.so,--as-needed")
      endif()
    endforeach()
  endif()
  _gantry_libtorch_wrap(libs ${ARG_BUILD_ONLY} ${libs})
  target_link_libraries(${target} INTERFACE ${libs})
  _gantry_libtorch_wrap(rpath ${ARG_BUILD_ONLY} "LINKER:-rpath,${root}/lib")
  target_link_options(${target} INTERFACE ${rpath})
  _gantry_libtorch_link_options(${target} "${root}" ${ARG_BUILD_ONLY})
endfunction()

function(gantry_libtorch_from_package target)
  cmake_parse_arguments(ARG "BUILD_ONLY" "" "" ${ARGN})
  _gantry_libtorch_wrap(libs ${ARG_BUILD_ONLY} ${TORCH_LIBRARIES})
  target_link_libraries(${target} INTERFACE ${libs})
  _gantry_libtorch_wrap(includes ${ARG_BUILD_ONLY} ${TORCH_INCLUDE_DIRS})
  target_include_directories(${target} SYSTEM INTERFACE ${includes})
  _gantry_libtorch_link_options(${target} "${TORCH_INSTALL_PREFIX}" ${ARG_BUILD_ONLY})
endfunction()
