// The read-only web pages the daemons serve, as text compiled into the binaries (no files to
// install, nothing fetched from elsewhere): tesserad's node page (over /v1/state) and
// tessera-extender's cluster page (over /inspect). Each page is one self-contained HTML file in
// this folder that draws itself with its own script from the JSON route named; nothing here reads
// state, routes requests or knows HTTP.
#pragma once

#include <string_view>

namespace tessera::pages {

// node.html: each GPU of the node, its memory and GPU time split per container, caps, achieved
// shares and processes, refreshed every second.
std::string_view NodePage();

// cluster.html: every node's GPUs drawn as their memory and GPU time split per pod, stranded
// capacity marked, and the pods still waiting with their reasons, refreshed every two seconds.
std::string_view ClusterPage();

// The Content-Type both pages are served with.
inline constexpr std::string_view kContentType = "text/html; charset=utf-8";

}  // namespace tessera::pages
