# The malformed-input corpus (tools/malformed_corpus.py, Python standard library only): every case must exit 1
# with one `tessera: error: ...` line naming the file, field, tensor or flag, within 2 s CPU and 256 MB + the
# model's size. One CTest test per input class, so a failure says which parser it is in.
if(TESSERA_TESTS)
  find_program(TESSERA_PYTHON3 python3)
  if(TESSERA_PYTHON3)
    set(_tessera_corpus_limits)
    if(TESSERA_SANITIZE OR TESSERA_FUZZ)
      # ASan reserves terabytes of address space and runs several times slower: keep the crash, hang and
      # message checks, relax the resource ones (the release build holds those).
      set(_tessera_corpus_limits --mem-cap-mb 0 --cpu-limit 30 --rss-limit-mb 4096 --timeout 120)
    endif()
    foreach(cls config generation safetensors gguf tokenizer files cli launch)
      add_test(NAME malformed_corpus_${cls}
               COMMAND ${TESSERA_PYTHON3} ${CMAKE_SOURCE_DIR}/tools/malformed_corpus.py
                       --cli $<TARGET_FILE:tessera_cli> --class ${cls} -j 2 --report ${_tessera_corpus_limits})
      set_tests_properties(malformed_corpus_${cls} PROPERTIES TIMEOUT 300 LABELS malformed)
    endforeach()
    # The runner must itself fail on a wrong exit code, a missing prefix, a hang, CPU time and RSS.
    add_test(NAME malformed_corpus_selftest COMMAND ${TESSERA_PYTHON3} ${CMAKE_SOURCE_DIR}/tools/malformed_corpus.py --self-test)
    set_tests_properties(malformed_corpus_selftest PROPERTIES TIMEOUT 60 LABELS malformed)
  else()
    message(STATUS "python3 not found: the malformed-input corpus (tools/malformed_corpus.py) is not registered")
  endif()
endif()
