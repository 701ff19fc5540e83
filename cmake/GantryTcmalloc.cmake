# Finding and linking gperftools' tcmalloc (Debian's libtcmalloc-minimal4) as
# a program's malloc. Gantry's build (GantryModelMalloc.cmake) and the
# installed package (GantryConfig.cmake's gantry_link_model_malloc) both use
# it, so a user's program gets tcmalloc the way gantry-worker does.

# gantry_find_tcmalloc(WHO HINT_DIR): sets the cache variable
# GANTRY_TCMALLOC_LIBRARY, looking in HINT_DIR first, or stops configure with
# an error that begins with WHO and names the package to install.
function(gantry_find_tcmalloc who hint_dir)
  # Only the runtime package is needed: the loader is all that uses it.
  find_library(GANTRY_TCMALLOC_LIBRARY NAMES tcmalloc_minimal libtcmalloc_minimal.so.4
               HINTS ${hint_dir})
  if(NOT GANTRY_TCMALLOC_LIBRARY)
    message(FATAL_ERROR
            "${who}tcmalloc not found (libtcmalloc_minimal.so.4): install Debian's "
            "libtcmalloc-minimal4, or configure with -DGANTRY_WITH_TCMALLOC=OFF to keep glibc's "
            "malloc")
  endif()
endfunction()

# gantry_link_tcmalloc(TARGET LIBRARY): links LIBRARY into the executable
# TARGET, as the first library the loader resolves malloc from.
function(gantry_link_tcmalloc target library)
  # Nothing calls it by name, so --as-needed (Debian's default) would drop it.
  target_link_options(${target} PRIVATE "LINKER:--push-state,--no-as-needed,${library},--pop-state")
endfunction()
