# The malloc of the programs that run models on a CPU: gperftools' tcmalloc
# (Debian's libtcmalloc-minimal4) instead of glibc's.
#
# A forward pass allocates and frees dozens of blocks of a few MiB (each
# operator's output, oneDNN's scratch space), from the thread that drives
# libtorch's team while the other threads of the team wait at the next
# barrier. glibc serves such blocks by splitting and merging chunks of one
# heap; tcmalloc from spans it keeps per size. On a 2-core Zen 5 EPYC the
# bfloat16 seed job ran about 4% faster with it, and a replica's memory after
# long texts stayed lower (docs/benchmarks-encoder.md). Torch's own
# performance guide recommends tcmalloc or jemalloc for CPU inference.
#
# gantry_link_model_malloc(TARGET) links it into an executable, as the first
# library the loader resolves malloc from. Not under sanitizers
# (GANTRY_SANITIZE, GANTRY_FUZZ), which replace malloc themselves.
include(GantryTcmalloc)
option(GANTRY_WITH_TCMALLOC
       "Link tcmalloc into the programs that run models (gantry-worker, encode_10k, encoder_bare)"
       ON)
set(GANTRY_MODEL_MALLOC_LIBRARY "")
if(GANTRY_WITH_TCMALLOC AND (GANTRY_SANITIZE OR GANTRY_FUZZ))
  message(STATUS "tcmalloc: not linked under sanitizers (GANTRY_SANITIZE or GANTRY_FUZZ)")
elseif(GANTRY_WITH_TCMALLOC)
  gantry_find_tcmalloc("" "")
  set(GANTRY_MODEL_MALLOC_LIBRARY "${GANTRY_TCMALLOC_LIBRARY}")
  message(STATUS "tcmalloc: ${GANTRY_MODEL_MALLOC_LIBRARY}")
endif()

function(gantry_link_model_malloc target)
  if(GANTRY_MODEL_MALLOC_LIBRARY)
    gantry_link_tcmalloc(${target} "${GANTRY_MODEL_MALLOC_LIBRARY}")
    target_compile_definitions(${target} PRIVATE GANTRY_MODEL_MALLOC_TCMALLOC=1)
  endif()
endfunction()
