# Writes a C++ source that returns a text file's contents, so pages ship inside the binaries.
# cmake -P with IN (the file), OUT (the .cc to write) and FUNCTION (the name in tessera::pages).
file(READ ${IN} text)
set(delimiter "tessera_page")
string(FIND "${text}" ")${delimiter}\"" found)
if(NOT found EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )${delimiter}\"")
endif()
get_filename_component(name ${IN} NAME)
file(WRITE ${OUT}.tmp
"// Generated from ${name} by cmake/embed_text.cmake at build time; edit ${name} instead.
#include \"pages/pages.h\"

namespace tessera::pages {

std::string_view ${FUNCTION}() {
  static constexpr char kText[] = R\"${delimiter}(${text})${delimiter}\";
  return {kText, sizeof(kText) - 1};
}

}  // namespace tessera::pages
")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
