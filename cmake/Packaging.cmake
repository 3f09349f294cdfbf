# A Debian package of everything `cmake --install` installs (tools, man pages, bash completion,
# libkvtool with its C header, CMake package and pkg-config file), under /usr:
#   cd build && cpack --config CPackConfig.cmake -G DEB   ->  kvtool_<version>_amd64.deb
# Depends is computed by dpkg-shlibdeps (dpkg-dev) from the ELF files in the package, so it names
# the Debian packages the binaries were really linked against (FAISS is linked statically and adds
# none); CPack needs the `file` utility to find those ELF files. tests/install/test_deb.sh checks it.
# Configure with -DCMAKE_INSTALL_PREFIX=/usr for a package whose library sits in the multiarch
# folder (lib/x86_64-linux-gnu); the default prefix puts it in /usr/lib, which ld.so also searches.

set(KVTOOL_DEB_MAINTAINER "kvtool maintainers <kvtool-maintainers@localhost>"
    CACHE STRING "Maintainer field of the Debian package (cmake/Packaging.cmake)")

set(CPACK_PACKAGE_NAME kvtool)
set(CPACK_PACKAGE_VENDOR "kvtool")
set(CPACK_PACKAGE_CONTACT "${KVTOOL_DEB_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "offline retrieval indexes over LLM attention K/V-cache dumps")
# The extended description (Debian's Description body), folded by hand: CPackDeb only indents it.
string(JOIN "\n" CPACK_PACKAGE_DESCRIPTION
       "kvtool builds offline retrieval indexes (pq, clusterkv, lsh, squeeze) over the"
       "attention K/V cache that an LLM serving system dumps for a long prompt, signs each"
       "index bound to the exact dump it came from, and loads indexes into a host pool that a"
       "decode runtime asks for the rows worth attending to."
       "."
       "This package holds the command-line tools with their manual pages and bash completion,"
       "libkvtool, the runtime pool's shared library, with its C header, CMake package and"
       "pkg-config file, and the Python package kvtool (dumps from NumPy arrays and PyTorch"
       "caches, builds, evaluation and the pool from Python).")
set(CPACK_RESOURCE_FILE_LICENSE "${CMAKE_SOURCE_DIR}/LICENSE")
# Debian policy 12.5: every package carries its licence as /usr/share/doc/<package>/copyright.
install(FILES ${CMAKE_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME copyright)
# Strip the installed binaries: a Debian package ships no debug symbols in its main package.
set(CPACK_STRIP_FILES ON)

set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # kvtool_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# A shlibs file and ldconfig calls (postinst, postrm) for libkvtool.so.0, so that packages built
# against it get a versioned Depends on kvtool and the linker cache learns the library on install.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")

# Recommends: bash-completion, which loads the packaged completions (usr/share/bash-completion/
# completions) in interactive shells; and, when the Python package (python/) is built, the
# interpreter of this minor version and NumPy that it imports. The tools and libkvtool need none of
# them, so they are recommended, not required.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "bash-completion")
if(KVTOOL_PYTHON_BUILT)
  execute_process(COMMAND ${PYTHON_EXECUTABLE} -c "import sys; print('%d.%d' % sys.version_info[:2])"
                  OUTPUT_VARIABLE KVTOOL_PY_VERSION OUTPUT_STRIP_TRAILING_WHITESPACE)
  string(REGEX MATCH "^([0-9]+)\\.([0-9]+)$" KVTOOL_PY_MATCH "${KVTOOL_PY_VERSION}")
  math(EXPR KVTOOL_PY_NEXT_MINOR "${CMAKE_MATCH_2} + 1")
  string(APPEND CPACK_DEBIAN_PACKAGE_RECOMMENDS
         ", python3 (>= ${KVTOOL_PY_VERSION}), python3 (<< ${CMAKE_MATCH_1}.${KVTOOL_PY_NEXT_MINOR}), python3-numpy")
endif()

include(CPack)
