# cmake -DROOT=<source dir> -DTABLE=<build>/layering_table.cmake -P check_includes.cmake
#
# Fails when a file includes a header of a target its own target does not link
# (see cmake/Layering.cmake), or a system header outside the folder it is kept to.
cmake_minimum_required(VERSION 3.25)
include(${TABLE})

# System headers kept to a few folders: "<prefix>=<folder>[|<folder>...]" (regex on the header name).
set(kept_headers
  "^rdma/=gossip/transport/fabric"
  "^asio=node/control"
  "^capnp/=node/control"
  "^kj/=node/control"
  "^sodium=node/control|gossip/transport/seal"
  "^openssl/=gossip/transport/seal"
  "^cuda=kernels/cuda"
  "^cudnn=kernels/cuda"
  "^cublas=kernels/cuda"
  "^curand=kernels/cuda")

# The target owning `path` (a file or folder relative to ROOT): the longest folder prefix.
function(owner_of path out)
  set(best "")
  set(best_length -1)
  foreach(target ${CHORUS_TARGETS})
    set(folder "${CHORUS_FOLDER_${target}}/")
    string(LENGTH "${folder}" length)
    string(LENGTH "${path}" path_length)
    if(length GREATER path_length)
      continue()
    endif()
    string(SUBSTRING "${path}" 0 ${length} head)
    if(head STREQUAL folder AND length GREATER best_length)
      set(best ${target})
      set(best_length ${length})
    endif()
  endforeach()
  set(${out} "${best}" PARENT_SCOPE)
endfunction()

set(errors "")
set(checked 0)
foreach(target ${CHORUS_TARGETS})
  set(folder "${CHORUS_FOLDER_${target}}")
  file(GLOB_RECURSE files RELATIVE ${ROOT}
    ${ROOT}/${folder}/*.h ${ROOT}/${folder}/*.cc ${ROOT}/${folder}/*.cu ${ROOT}/${folder}/*.cuh)
  foreach(file ${files})
    owner_of(${file} file_owner)
    if(NOT file_owner STREQUAL target)
      continue()  # a subfolder with a target of its own
    endif()
    math(EXPR checked "${checked} + 1")
    file(STRINGS ${ROOT}/${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
    foreach(line ${lines})
      if(line MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"")
        set(header "${CMAKE_MATCH_1}")
        if(NOT header MATCHES "/")
          continue()  # a file beside it (generated, or a local .cuh)
        endif()
        owner_of(${header} header_owner)
        if(header_owner STREQUAL "")
          list(APPEND errors "${file}: #include \"${header}\": no target owns that folder")
        elseif(NOT header_owner IN_LIST CHORUS_ALLOWED_${target})
          list(APPEND errors
            "${file}: #include \"${header}\": ${header_owner} is not linked by ${target}")
        endif()
      elseif(line MATCHES "#[ \t]*include[ \t]*<([^>]+)>")
        set(header "${CMAKE_MATCH_1}")
        foreach(rule ${kept_headers})
          string(REPLACE "=" ";" parts "${rule}")
          list(GET parts 0 pattern)
          list(GET parts 1 homes)
          if(NOT header MATCHES "${pattern}")
            continue()
          endif()
          string(REPLACE "|" ";" home_list "${homes}")
          set(at_home FALSE)
          foreach(home ${home_list})
            string(LENGTH "${home}/" home_length)
            string(SUBSTRING "${file}" 0 ${home_length} head)
            if(head STREQUAL "${home}/")
              set(at_home TRUE)
            endif()
          endforeach()
          if(NOT at_home)
            list(APPEND errors "${file}: #include <${header}>: kept to ${homes}")
          endif()
        endforeach()
      endif()
    endforeach()
  endforeach()
endforeach()

if(errors)
  list(JOIN errors "\n  " text)
  message(FATAL_ERROR "Include layering (cmake/Layering.cmake):\n  ${text}")
endif()
message(STATUS "Include layering: ${checked} files checked")
