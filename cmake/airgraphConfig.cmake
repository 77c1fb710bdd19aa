# airgraph's CMake package, for op plugins (include/airgraph/op_plugin.h):
#
#   find_package(airgraph CONFIG REQUIRED)       # -Dairgraph_DIR=$(python -c "import airgraph; print(airgraph.cmake_dir())")
#   airgraph_add_plugin(mylib mylib_ops.cpp)     # a shared library airgraph.load_library / airgraph-run --plugin load
#
# A plugin links nothing of airgraph's: airgraph::plugin is the public headers only (the plugin's
# ops reach the engine through the C interface the header declares).
find_path(AIRGRAPH_INCLUDE_DIR airgraph/op_plugin.h
  HINTS "${CMAKE_CURRENT_LIST_DIR}/../include" "${CMAKE_CURRENT_LIST_DIR}/../../../include" NO_DEFAULT_PATH)
if(NOT AIRGRAPH_INCLUDE_DIR)
  set(airgraph_FOUND FALSE)
  set(airgraph_NOT_FOUND_MESSAGE "airgraph/op_plugin.h is not installed beside ${CMAKE_CURRENT_LIST_FILE}")
  return()
endif()
if(NOT TARGET airgraph::plugin)
  add_library(airgraph::plugin INTERFACE IMPORTED)
  set_target_properties(airgraph::plugin PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${AIRGRAPH_INCLUDE_DIR}")
endif()

# airgraph_add_plugin(<target> <sources>...): a MODULE library (lib<target>.so) against the plugin headers
function(airgraph_add_plugin target)
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE airgraph::plugin)
  target_compile_features(${target} PRIVATE cxx_std_17)
  set_target_properties(${target} PROPERTIES CXX_VISIBILITY_PRESET hidden)  # (the entry point is exported by its declaration)
endfunction()
