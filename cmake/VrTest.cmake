# vr_add_test(NAME name SOURCES a.c ... [LIBS ...] [LABELS ...] [TIMEOUT s] [ARGS ...])
# A cmocka (or plain) C test run by ctest; its exit code is the verdict.
function(vr_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_link_libraries(${T_NAME} PRIVATE vr_cmocka vr_common ${T_LIBS})
  target_include_directories(${T_NAME} PRIVATE ${CMAKE_SOURCE_DIR}/tests/common) # vr_test_seed.h
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} ${T_ARGS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "VR_BIN_DIR=${CMAKE_BINARY_DIR}/bin;VR_SOURCE_DIR=${CMAKE_SOURCE_DIR};VR_FIXTURES=${CMAKE_SOURCE_DIR}/tests/fixtures;ASAN_OPTIONS=detect_leaks=1:abort_on_error=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  if(T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()

# vr_subdirs(): add_subdirectory for every child folder holding a CMakeLists.txt,
# so components can grow their own test/tool folders without editing a shared file.
function(vr_subdirs)
  file(GLOB _children LIST_DIRECTORIES true RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT _children)
  foreach(_c ${_children})
    if(IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${_c} AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${_c}/CMakeLists.txt)
      add_subdirectory(${_c})
    endif()
  endforeach()
endfunction()

# vr_require_targets(suite target...): a suite whose programs or libraries are not defined
# fails the configure step instead of silently registering no tests (a target is missing
# when the build file that defines it skipped it, or was included after tests/).
function(vr_require_targets suite)
  foreach(_t ${ARGN})
    if(NOT TARGET ${_t})
      message(FATAL_ERROR "${suite} needs target ${_t}, which is not defined: its tests cannot be registered. "
                          "HINT: see the configure messages above for why ${_t} was skipped")
    endif()
  endforeach()
endfunction()
