// A small evaluator of the part of CEL (the Common Expression Language) that DeviceClass and claim
// selectors on gpu.tessera.io's devices use: not cel-go, and not all of CEL. An expression sees one
// device, as upstream's selectors do:
//   device.driver                         string
//   device.attributes["<domain>"].<name>  the attribute's value (int, bool, string, version); an
//                                         attribute written without a domain is in the driver's
//   device.capacity["<domain>"].<name>    the capacity's value, a quantity
//   device.allowMultipleAllocations       bool
// An unknown domain is an empty map; an unknown attribute is an error ("no such key"), so a
// careful expression tests has(...) first. What it understands:
//   literals       "str", 'str', 12, -3, true, false, null, [a, b, ...]
//   operators      == != < <= > >= (ints, strings, bools; == and != on any), && || ! (CEL's
//                  commutative && and ||: an error on one side yields to false or true on the
//                  other), x in [list], ( ), cond ? a : b
//   macros         has(device.attributes["d"].name), has(device.capacity["d"].name)
//   functions      quantity("4Gi"), semver("1.2.3"), size(x), int(x), string(x)
//   methods        s.startsWith(p), s.endsWith(p), s.contains(p), s.size(), s.lowerAscii(),
//                  q.compareTo(q2), q.isGreaterThan(q2), q.isLessThan(q2), q.asInteger(),
//                  v.compareTo(v2), v.isGreaterThan(v2), v.isLessThan(v2) (versions),
//                  attributes.includes(x) on a scalar (x == it)
// Anything else fails to compile with a message naming the position. docs/kubernetes.md lists the
// subset. Pure functions: no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/result.h"
#include "k8s/objects.h"

namespace tessera::k8s::dra {

// A device as a selector sees it, from a slice's device JSON.
struct CelDevice {
  std::string driver;
  Json attributes = Json::object();  // name -> {"int"|"bool"|"string"|"version": value}
  Json capacity = Json::object();    // name -> {"value": quantity, ...}
  bool allow_multiple_allocations = false;

  static CelDevice FromSliceDevice(const std::string& driver, const Json& device);
};

class CelProgram {
 public:
  // Compiles `expression`; the error names the position and what was found.
  static Result<CelProgram> Compile(const std::string& expression);
  // True or false for `device`; an error for anything but a bool, or a runtime error.
  Result<bool> Matches(const CelDevice& device) const;
  const std::string& expression() const { return expression_; }

  struct Node;

 private:
  std::string expression_;
  std::shared_ptr<const Node> root_;
};

// Compiled programs by expression text (selectors repeat), as upstream's CEL cache. Not
// thread-safe.
class CelCache {
 public:
  Result<const CelProgram*> Get(const std::string& expression);

 private:
  std::map<std::string, Result<CelProgram>> programs_;
};

}  // namespace tessera::k8s::dra
