# cmake --install: regcached and regcachectl; the client library libregcache.so and the
# registered allocator libregcache_alloc.so with their public headers, regcache.pc and
# regcache_alloc.pc for pkg-config and the CMake package `regcache` (regcache::client,
# regcache::client_cpp for C++ users of regcache/client.h, regcache::alloc); the Python package
# (importable from the prefix, and a pip-installable copy: below); the systemd unit
# (lib/systemd/system/regcached.service) and the sample flag file (etc/regcache/regcached.conf,
# under the prefix), the unit's paths rewritten to the configured prefix. Included from
# client/CMakeLists.txt, where the targets are. Nothing else of the project is installed: the
# client library needs no other library of it (see the comment on libregcache.so there).
#
# The installed files are relocatable (the .pc file's prefix is ${pcfiledir}-relative, the CMake
# package's paths are relative to itself), so `cmake --install <build> --prefix <dir>` works for
# any <dir>, whatever CMAKE_INSTALL_PREFIX was at configure time (tests/install does that).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS regcached regcachectl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
set_target_properties(regcache PROPERTIES EXPORT_NAME client)
install(TARGETS regcache regcache_alloc EXPORT regcacheTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/regcache/regcache.h
              ${PROJECT_SOURCE_DIR}/include/regcache/client.h
              ${PROJECT_SOURCE_DIR}/include/regcache/regcache_alloc.h
              ${PROJECT_SOURCE_DIR}/include/regcache/descriptor.h
              ${PROJECT_SOURCE_DIR}/include/regcache/sim_peer.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/regcache)

set(regcache_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/regcache)
install(EXPORT regcacheTargets NAMESPACE regcache:: DESTINATION ${regcache_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/regcacheConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/regcacheConfig.cmake
                              INSTALL_DESTINATION ${regcache_cmake_dir})
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/regcacheConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/regcacheConfig.cmake
              ${PROJECT_BINARY_DIR}/regcacheConfigVersion.cmake
        DESTINATION ${regcache_cmake_dir})

# regcache.pc: prefix relative to the .pc file's own folder (pkg-config's ${pcfiledir}).
file(RELATIVE_PATH regcache_pc_to_prefix /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" regcache_pc_to_prefix "${regcache_pc_to_prefix}")
foreach(pc regcache regcache_alloc)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

# The unit names regcached and its flag file where a default install puts them (/usr/local/bin,
# /etc/regcache); the installed copy names where this build's prefix puts them. The paths are
# the configured prefix's (a unit cannot be relative): install with that prefix, or edit the two
# paths after `--prefix`.
file(READ ${PROJECT_SOURCE_DIR}/deploy/regcached.service regcache_unit)
string(REPLACE "/usr/local/bin/regcached" "${CMAKE_INSTALL_FULL_BINDIR}/regcached" regcache_unit
               "${regcache_unit}")
string(REPLACE "/etc/regcache/regcached.conf" "${CMAKE_INSTALL_FULL_SYSCONFDIR}/regcache/regcached.conf"
               regcache_unit "${regcache_unit}")
file(WRITE ${PROJECT_BINARY_DIR}/regcached.service "${regcache_unit}")
install(FILES ${PROJECT_BINARY_DIR}/regcached.service DESTINATION lib/systemd/system)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/regcached.conf
        DESTINATION ${CMAKE_INSTALL_SYSCONFDIR}/regcache)

# The Python client (client/python): the package where this interpreter looks under the prefix
# (REGCACHE_PYTHON_DIR; lib/python3.<minor>/dist-packages: Debian's python3 has it on its path for
# /usr/local), and a copy with its pyproject.toml in share/regcache/python for
# `pip install --no-build-isolation --no-index` into a virtual environment. Both get an
# _installed.py naming the installed libregcache.so, written at install time so that
# `--prefix` and DESTDIR are honoured; the package loads that library first.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  set(regcache_python_default "lib/python${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}/dist-packages")
else()
  set(regcache_python_default "lib/python3/dist-packages")
endif()
set(REGCACHE_PYTHON_DIR "${regcache_python_default}" CACHE STRING
    "where `cmake --install` puts the Python package, relative to the prefix")
foreach(dir ${REGCACHE_PYTHON_DIR} ${CMAKE_INSTALL_DATADIR}/regcache/python)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/python/regcache DESTINATION ${dir}
          PATTERN __pycache__ EXCLUDE)
  install(CODE "
    file(WRITE \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${dir}/regcache/_installed.py\"
         \"# Written by cmake --install: the library this installed package loads first.\\n\"
         \"LIBRARY = '\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/libregcache.so.0'\\n\")")
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/client/python/pyproject.toml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/regcache/python)
