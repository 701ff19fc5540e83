# Swagger UI's files for the HTTP gateway's GET /docs, from the PyPI package
# swagger-ui-py (Swagger UI 5; swagger-ui-bundle on PyPI ships 4.15, which
# cannot render OpenAPI 3.1). scripts/setup.sh installs it into the project
# venv; GANTRY_SWAGGER_UI_SOURCE_DIR names its `swagger_ui/static` folder
# elsewhere. The files go to <build>/share/gantry/swagger-ui, where the
# gateway finds them from bin/gantry, and are installed to
# <prefix>/share/gantry/swagger-ui. Without them the gateway still serves
# /openapi.json and answers /docs with 404 saying what is missing.
set(GANTRY_SWAGGER_UI_SOURCE_DIR "" CACHE PATH
  "Folder with swagger-ui-bundle.js and swagger-ui.css (default: swagger_ui/static of the project venv)")
set(_gantry_swagger_dir "${GANTRY_SWAGGER_UI_SOURCE_DIR}")
if(NOT _gantry_swagger_dir)
  file(GLOB _gantry_swagger_found
    "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/swagger_ui/static/swagger-ui-bundle.js")
  if(_gantry_swagger_found)
    list(GET _gantry_swagger_found 0 _gantry_swagger_file)
    get_filename_component(_gantry_swagger_dir "${_gantry_swagger_file}" DIRECTORY)
  endif()
endif()
set(_gantry_swagger_files swagger-ui-bundle.js swagger-ui.css favicon-32x32.png favicon-16x16.png LICENSE)
if(_gantry_swagger_dir AND EXISTS "${_gantry_swagger_dir}/swagger-ui-bundle.js")
  foreach(_file IN LISTS _gantry_swagger_files)
    configure_file("${_gantry_swagger_dir}/${_file}"
      "${PROJECT_BINARY_DIR}/share/gantry/swagger-ui/${_file}" COPYONLY)
    install(FILES "${PROJECT_BINARY_DIR}/share/gantry/swagger-ui/${_file}"
      DESTINATION "${CMAKE_INSTALL_DATADIR}/gantry/swagger-ui")
  endforeach()
  message(STATUS "Swagger UI for GET /docs: ${_gantry_swagger_dir}")
else()
  message(STATUS "Swagger UI not found (scripts/setup.sh installs swagger-ui-py into .venv, or set "
                 "GANTRY_SWAGGER_UI_SOURCE_DIR): the gateway will answer GET /docs with 404")
endif()
