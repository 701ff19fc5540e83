# Warnings as errors on Gantry's own targets only; third-party and generated
# code is included as SYSTEM so its warnings never fail our build.
function(gantry_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  if(GANTRY_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
    # GCC 12 at -O3 (Release) warns of an overlapping memcpy inside
    # libstdc++'s own std::string operator+ (GCC bug 105329): not our code,
    # and it made a Release build fail on stock Debian 12.
    target_compile_options(${target} PRIVATE
      $<$<AND:$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>,$<CONFIG:Release>>:-Wno-restrict>)
  endif()
endfunction()

# gantry_add_executor(NAME SOURCES a.cc ... [LIBS lib ...])
# Builds an executor as an OBJECT library, so its GANTRY_REGISTER_EXECUTOR
# registrar is never dropped by the linker, and adds it to the list that
# gantry-worker links (GANTRY_EXECUTOR_TARGETS).
function(gantry_add_executor name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  set(target gantry_executor_${name})
  add_library(${target} OBJECT ${ARG_SOURCES})
  target_link_libraries(${target} PUBLIC gantry_core ${ARG_LIBS})
  target_include_directories(${target} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  gantry_target_warnings(${target})
  set_property(GLOBAL APPEND PROPERTY GANTRY_EXECUTOR_TARGETS ${target})
  set_property(GLOBAL APPEND PROPERTY GANTRY_EXECUTOR_NAMES ${name})
endfunction()
