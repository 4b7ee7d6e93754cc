# OpenMPI (Debian libopenmpi-dev) carries the native backend's tensor-parallel collectives. Without it the
# library still builds; --tp-size > 1 on the cpu device then fails with a message saying what to install.
find_package(MPI COMPONENTS C QUIET)
if(MPI_C_FOUND)
  target_link_libraries(tessera PRIVATE MPI::MPI_C)
  target_compile_definitions(tessera PRIVATE TESSERA_HAVE_MPI=1)
else()
  message(STATUS "MPI not found: native tensor parallelism disabled (apt-get install libopenmpi-dev openmpi-bin)")
endif()
