cmake_minimum_required(VERSION 3.25)
# What the guide's "Layers" section (docs/guide.md) claims, checked on the sources:
#   1. every public header, every header of include/ckpt/detail/ and every file of src/ has a
#      layer, and no file includes one of a higher layer;
#   2. no include goes in a circle: neither between files nor between units (a unit is a name's
#      header and sources: include/ckpt/file.hpp; src/format/reader.cpp is reader; src/mpi/X is the unit mpi/X);
#   3. the front door of a load (src/format/load.cpp) sits above the file reader and the sharded
#      reader (the file reader reaches neither; the sharded one does not reach load), the front
#      door of a save (src/format/save.cpp) above the file writer, and the reader and the writer
#      do not reach each other;
#   4. the headers of ckpt/detail/ are there because a public header needs them;
#   5. the folders of src/ are layers in an order: none includes a file of a later folder.
# The public headers' layers are read from the guide's table itself, the detail headers' are
# listed below, and a piece of src/ is on its folder's layer. Run by CTest as
#   cmake -DCKPT_SOURCE_DIR=... -P tests/layers.cmake
# and fails listing every offence, except the ones listed in `known` below: those are printed
# (each edge that makes them) and left to be fixed.

# Offences of today's tree, one string each as this script prints it. Remove a line when it is
# fixed; the test fails on any offence that is not here.
set(known
)

# 1. Layers. The public headers: the rows "| N. ... |" of the guide's Layers table.
file(STRINGS "${CKPT_SOURCE_DIR}/docs/guide.md" rows REGEX "^\\| [1-9]\\. ")
foreach(row IN LISTS rows)
  string(REGEX MATCH "^\\| ([1-9])\\." _ "${row}")
  set(n ${CMAKE_MATCH_1})
  string(REGEX MATCHALL "`[a-z_]+\\.hpp`" names "${row}")
  foreach(name IN LISTS names)
    string(REGEX REPLACE "`([a-z_]+)\\.hpp`" "\\1" name "${name}")
    set(layer_${name} ${n})
  endforeach()
endforeach()
if(NOT rows)
  message(FATAL_ERROR "ckpt layers: no layer table ('| 1. ...') found in docs/guide.md")
endif()

# The headers of include/ckpt/detail/ (not in the guide: not the API), each on the layer of the
# public headers that need it.
set(layer_detail/transpose 1)     # the transpose kernel's entry point (leaf.hpp)
set(layer_detail/pages 2)         # tensor_access: where a tensor's bytes live, the copies out of a loaded file
set(layer_detail/cast 2)          # the cast of a tensor, for the extraction's templates (params.hpp)
set(layer_detail/entry_source 2)  # what the writer reads an entry from
set(layer_detail/field_names 3)   # the field names of ckpt::fields (named.hpp)
set(layer_detail/live_source 3)   # entries streamed from live leaves (section.hpp, params.hpp)
set(layer_detail/read_plan 3)     # the one read of entries into leaves (params.hpp, section.hpp, adam.hpp)
set(layer_detail/dtype_traits 1)  # the dtypes' properties, the scalars' table (dtype.hpp)
set(layer_detail/sizes 2)         # a shape's elements and bytes (tensor.hpp)
set(layer_detail/view_types 2)    # the types of the views (view.hpp)
set(layer_detail/leaf_bytes 3)    # the copies between a leaf's storage and an entry (leaf.hpp)
set(layer_detail/leaf_hooks 3)    # the hooks the library calls for a leaf (leaf.hpp)
set(layer_detail/eigen_leaves 3)  # the traits of Eigen matrices, arrays and tensors (leaf.hpp)
set(layer_detail/engine_state 3)  # the state of a <random> engine (leaf.hpp)
set(layer_detail/leaf_copies 3)   # a leaf's shape, a copy of it, an unfilled leaf like it (leaf.hpp)
set(layer_detail/walk 3)          # the walk of named structures (named.hpp)
set(layer_detail/flat_array 3)    # zero leaves, a leaf as a flat array (leafwise.hpp)
set(layer_detail/section_access 3) # the way into a section's members (section.hpp)
set(layer_detail/lazy_copy 2)     # the copy-before-write rule of a lazy snapshot (adam.hpp, src/structures/snapshot.cpp)
set(layer_detail/extract 3)       # the read of one structure (params.hpp)
set(layer_detail/adam_update 4)   # Adam's moments and the update of a leaf (adam.hpp)
set(layer_detail/training_state 4) # the training state's section names and step entry (adam.hpp)
set(layer_detail/slice_reads 4)   # the part of an entry read_flat and read_rows read (mpi.hpp)

# The folders of src/ are layers (CMakeLists.txt lists the library's sources by folder): a private
# piece of src/ is on its folder's layer, and a source named after a public header must be on that
# header's (checked below). A folder includes only its own files and those of the folders before it
# in this list (5.).
set(src_folders base io s3 tensor format structures training run mpi)
set(folder_layer_base 1)        # errors, dtypes, UTF-8, hex, memory, digests, the transpose
set(folder_layer_io 1)          # files held by their descriptors, the atomic writer, mappings, the test seam
set(folder_layer_s3 1)          # the S3 client and its transfers: bytes only
set(folder_layer_tensor 2)      # tensors, checkpoints, views, dtype conversion, name patterns, adapters
set(folder_layer_format 2)      # the file formats, and the front doors of a load and a save
set(folder_layer_structures 3)  # leaves, named structures, params, sections, snapshots
set(folder_layer_training 4)     # the optimizer's work off its header (adam::update's threads)
set(folder_layer_run 4)         # the managers
set(folder_layer_mpi 4)         # ckpt::mpi

# A file's unit: include/ckpt/X.hpp and src/<folder>/X.* are X; include/ckpt/detail/X.hpp is
# detail/X; src/mpi/X.* is mpi/X and src/s3/X.* is s3/X (folders that are also namespaces).
function(unit_of rel out)
  get_filename_component(stem "${rel}" NAME_WE)
  if(rel MATCHES "^include/ckpt/detail/")
    set(stem "detail/${stem}")
  elseif(rel MATCHES "^src/(mpi|s3)/")
    set(stem "${CMAKE_MATCH_1}/${stem}")
  endif()
  set(${out} "${stem}" PARENT_SCOPE)
endfunction()

# A file's folder of src/ ("" for the headers of include/).
function(folder_of rel out)
  if(rel MATCHES "^src/([a-z0-9_]+)/")
    set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

file(GLOB headers RELATIVE "${CKPT_SOURCE_DIR}" "${CKPT_SOURCE_DIR}/include/ckpt/*.hpp")
file(GLOB details RELATIVE "${CKPT_SOURCE_DIR}" "${CKPT_SOURCE_DIR}/include/ckpt/detail/*.hpp")
file(GLOB_RECURSE sources RELATIVE "${CKPT_SOURCE_DIR}" "${CKPT_SOURCE_DIR}/src/*.cpp" "${CKPT_SOURCE_DIR}/src/*.hpp")
# ckpt/version.hpp is generated by the build (cmake/version.hpp.in).
set(generated include/ckpt/version.hpp)
set(files ${headers} ${details} ${sources} ${generated})

# The include graph: for each file, the files it includes (ckpt's own; <ckpt/...> and "...").
set(edges "")
foreach(rel IN LISTS headers details sources)
  file(STRINGS "${CKPT_SOURCE_DIR}/${rel}" lines REGEX "^#include [<\"]")
  get_filename_component(folder "${rel}" DIRECTORY)
  set(to_${rel} "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^#include <ckpt/([a-z_/]+\\.hpp)>")
      set(dep "include/ckpt/${CMAKE_MATCH_1}")
    elseif(line MATCHES "^#include \"([a-z0-9_./]+)\"")
      # Beside the file, else under src/ (the library's private include directory).
      cmake_path(SET dep NORMALIZE "${folder}/${CMAKE_MATCH_1}")
      if(NOT dep IN_LIST files)
        cmake_path(SET dep NORMALIZE "src/${CMAKE_MATCH_1}")
      endif()
    else()
      continue()
    endif()
    if(NOT dep IN_LIST files)
      message(FATAL_ERROR "ckpt layers: ${rel} includes ${dep}, which is not a file of include/ckpt or src")
    endif()
    list(APPEND to_${rel} "${dep}")
    list(APPEND edges "${rel}|${dep}")
  endforeach()
endforeach()

set(offences "")
set(unknown "")
foreach(rel IN LISTS files)
  unit_of("${rel}" unit)
  folder_of("${rel}" folder)
  if(NOT folder STREQUAL "" AND NOT DEFINED folder_layer_${folder})
    list(APPEND unknown "${rel} (folder src/${folder}/ has no layer)")
  elseif(NOT folder STREQUAL "" AND DEFINED layer_${unit} AND NOT layer_${unit} EQUAL folder_layer_${folder})
    list(APPEND offences "${rel}: named after a header of layer ${layer_${unit}}, in src/${folder}/ of layer ${folder_layer_${folder}}")
  elseif(NOT folder STREQUAL "")
    set(layer_${unit} "${folder_layer_${folder}}")
  elseif(NOT DEFINED layer_${unit})
    list(APPEND unknown "${rel} (unit ${unit})")
  endif()
  set(layer_of_${rel} "${layer_${unit}}")
endforeach()
if(unknown)
  list(JOIN unknown "\n  " text)
  message(FATAL_ERROR "ckpt layers: files without a layer (a public header goes into the guide's "
                      "Layers table, a detail header or a private piece of src/ into tests/layers.cmake):\n  ${text}")
endif()
foreach(edge IN LISTS edges)
  string(REPLACE "|" ";" pair "${edge}")
  list(GET pair 0 from)
  list(GET pair 1 to)
  if(layer_of_${to} GREATER layer_of_${from})
    list(APPEND offences "runs up a layer: ${from} (layer ${layer_of_${from}}) includes ${to} (layer ${layer_of_${to}})")
  endif()
endforeach()

# Everything `node` reaches in the graph whose successors are the lists succ_<node>.
function(reach node out)
  set(todo ${succ_${node}})
  set(seen "")
  while(todo)
    list(POP_FRONT todo current)
    if(current IN_LIST seen)
      continue()
    endif()
    list(APPEND seen "${current}")
    list(APPEND todo ${succ_${current}})
  endwhile()
  set(${out} "${seen}" PARENT_SCOPE)
endfunction()

# The circles of a graph given by `nodes` and succ_<node>: each group of nodes that reach each
# other, as "<kind> circle among: a, b, ..." (its nodes in the order of `nodes`).
function(circles kind nodes out)
  set(result "")
  set(done "")
  foreach(node IN LISTS nodes)
    reach("${node}" reach_${node})
  endforeach()
  foreach(node IN LISTS nodes)
    if(NOT node IN_LIST reach_${node} OR node IN_LIST done)
      continue()
    endif()
    set(group "")
    foreach(other IN LISTS nodes)
      if(other IN_LIST reach_${node} AND node IN_LIST reach_${other})
        list(APPEND group "${other}")
      endif()
    endforeach()
    list(APPEND done ${group})
    list(JOIN group ", " text)
    list(APPEND result "${kind} circle among: ${text}")
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# 2. Circles between files.
foreach(rel IN LISTS files)
  set(succ_${rel} ${to_${rel}})
endforeach()
circles(file "${files}" file_circles)
list(APPEND offences ${file_circles})

# 2. Circles between units; the file edges that make each are printed with it.
set(units "")
foreach(rel IN LISTS files)
  unit_of("${rel}" unit)
  list(APPEND units "${unit}")
  set(unit_files_${unit} "")
endforeach()
list(REMOVE_DUPLICATES units)
foreach(unit IN LISTS units)
  set(succ_${unit} "")
endforeach()
foreach(edge IN LISTS edges)
  string(REPLACE "|" ";" pair "${edge}")
  list(GET pair 0 from)
  list(GET pair 1 to)
  unit_of("${from}" a)
  unit_of("${to}" b)
  if(NOT a STREQUAL b)
    list(APPEND succ_${a} "${b}")
    list(APPEND unit_edges_${a}_${b} "${from} -> ${to}")
  endif()
endforeach()
circles(unit "${units}" unit_circles)
foreach(circle IN LISTS unit_circles)
  string(REGEX REPLACE "^unit circle among: " "" group "${circle}")
  string(REPLACE ", " ";" group "${group}")
  set(why "")
  foreach(a IN LISTS group)
    foreach(b IN LISTS group)
      list(APPEND why ${unit_edges_${a}_${b}})
    endforeach()
  endforeach()
  list(JOIN why ", " why)
  string(MD5 key "${circle}")
  set(why_${key} "${why}")
endforeach()
list(APPEND offences ${unit_circles})

# 3. The readers below load, the writer below save, the reader and the writer apart.
foreach(rule "reader|sharded" "reader|load" "sharded|load" "writer|save" "reader|writer" "writer|reader")
  string(REPLACE "|" ";" pair "${rule}")
  list(GET pair 0 a)
  list(GET pair 1 b)
  reach("${a}" reached)
  if(b IN_LIST reached)
    list(APPEND offences "reader order: the unit ${a} reaches ${b}")
  endif()
endforeach()

# 4. Each detail header is included by a public header, directly or through another detail one.
foreach(rel IN LISTS headers)
  set(succ_${rel} ${to_${rel}})
endforeach()
set(needed "")
foreach(rel IN LISTS headers)
  reach("${rel}" reached)
  list(APPEND needed ${reached})
endforeach()
foreach(rel IN LISTS details)
  if(NOT rel IN_LIST needed)
    list(APPEND offences "not needed by a public header: ${rel} (move it to src/)")
  endif()
endforeach()

# 5. The folders of src/ in their order: none includes a file of a folder after it.
foreach(edge IN LISTS edges)
  string(REPLACE "|" ";" pair "${edge}")
  list(GET pair 0 from)
  list(GET pair 1 to)
  folder_of("${from}" a)
  folder_of("${to}" b)
  if(a STREQUAL "" OR b STREQUAL "" OR a STREQUAL b)
    continue()
  endif()
  list(FIND src_folders "${a}" ia)
  list(FIND src_folders "${b}" ib)
  if(ib GREATER ia)
    list(APPEND offences "folder order: ${from} (src/${a}/) includes ${to} (src/${b}/, a later folder)")
  endif()
endforeach()

# The verdict.
set(new "")
set(still "")
foreach(offence IN LISTS offences)
  if(offence IN_LIST known)
    list(APPEND still "${offence}")
  else()
    list(APPEND new "${offence}")
  endif()
endforeach()
# An offence as printed: a unit circle with the includes that make it.
function(describe offence out)
  string(MD5 key "${offence}")
  if(DEFINED why_${key})
    set(${out} "${offence}\n      (${why_${key}})" PARENT_SCOPE)
  else()
    set(${out} "${offence}" PARENT_SCOPE)
  endif()
endfunction()
list(LENGTH files count)
list(LENGTH edges edge_count)
message(STATUS "ckpt layers: ${count} files, ${edge_count} includes")
if(still)
  set(text "")
  foreach(offence IN LISTS still)
    describe("${offence}" line)
    string(APPEND text "\n  ${line}")
  endforeach()
  message(STATUS "ckpt layers: known offences, still to fix (tests/layers.cmake's `known`):${text}")
endif()
foreach(offence IN LISTS known)
  if(NOT offence IN_LIST offences)
    message(STATUS "ckpt layers: fixed, remove it from `known`: ${offence}")
  endif()
endforeach()
if(new)
  set(text "")
  foreach(offence IN LISTS new)
    describe("${offence}" line)
    string(APPEND text "\n  ${line}")
  endforeach()
  message(FATAL_ERROR "ckpt layers: the tree breaks the guide's Layers section:${text}")
endif()
message(STATUS "ckpt layers: every file on its layer, no other circle, the readers in order")
