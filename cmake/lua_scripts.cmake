# lua_scripts.cmake -- the Redis store's Lua scripts, expanded at configure
# time: each line "--@include NAME" (any indentation) of a script is
# replaced by the text of src/store/redis/lib/NAME, the one home of the
# state arithmetic the scripts share (decode, encode, the clock).  A plain
# text expansion, not a function library: Redis runs an EVAL script's body
# anew on every call, so a local function would cost a closure per call;
# pasted in place the code is what each script held before.  The expanded
# text is what Redis receives, and its SHA-1 is the EVALSHA name.

# sluice_lua_expand(<file> <out_var>): the text of <file> with its includes
# expanded (a shared file may include another, 4 levels at most); every
# file read becomes a configure dependency, so editing a shared file
# regenerates the scripts on the next build.
function(sluice_lua_expand file out_var)
  set(depth 0)
  if(ARGN)
    list(GET ARGN 0 depth)
  endif()
  if(depth GREATER 4)
    message(FATAL_ERROR "${file}: --@include nested more than 4 deep")
  endif()
  if(NOT CMAKE_SCRIPT_MODE_FILE) # cmake -P: no build to regenerate
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${file})
  endif()
  file(READ ${file} text)
  set(lib ${CMAKE_SOURCE_DIR}/src/store/redis/lib)
  set(out "")
  math(EXPR next "${depth} + 1")
  set(marker "(^|\n)([ \t]*)--@include[ \t]+([A-Za-z0-9_]+\\.lua)[ \t]*\n")
  string(REGEX MATCH "${marker}" m "${text}")
  while(m)
    set(name ${CMAKE_MATCH_3})
    set(lead "${CMAKE_MATCH_1}")
    set(indent "${CMAKE_MATCH_2}")
    if(NOT EXISTS ${lib}/${name})
      message(FATAL_ERROR "${file}: --@include ${name}: no ${lib}/${name}")
    endif()
    sluice_lua_expand(${lib}/${name} inc ${next})
    # Its leading comment (what it reads and sets) stays in the shared
    # file: one line names it.  At the marker's indentation (blank lines
    # stay empty).
    string(REGEX MATCH "^(--[^\n]*\n)+" head "${inc}")
    string(LENGTH "${head}" head_len)
    string(SUBSTRING "${inc}" ${head_len} -1 inc)
    set(inc "-- lib/${name}\n${inc}")
    if(indent)
      string(REGEX REPLACE "\n([^\n])" "\n${indent}\\1" inc "${inc}")
      set(inc "${indent}${inc}")
    endif()
    string(FIND "${text}" "${m}" at)
    string(LENGTH "${m}" len)
    string(SUBSTRING "${text}" 0 ${at} before)
    math(EXPR after_at "${at} + ${len}")
    string(SUBSTRING "${text}" ${after_at} -1 text)
    string(APPEND out "${before}${lead}${inc}")
    string(REGEX MATCH "${marker}" m "${text}")
  endwhile()
  string(APPEND out "${text}")
  # A marker misspelt or cut would leave the script short of its code.
  if(out MATCHES "(^|\n)[ \t]*--@")
    message(FATAL_ERROR "${file}: a '--@' line that is not '--@include NAME.lua'")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()
