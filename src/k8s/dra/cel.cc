// The CEL subset's lexer, parser and evaluator (see the header).
#include "k8s/dra/cel.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <variant>
#include <vector>

#include "k8s/quantity.h"

namespace tessera::k8s::dra {

// ---- values ----
namespace {

struct Version {
  int64_t major = 0, minor = 0, patch = 0;
  std::string pre;  // pre-release identifiers; build metadata is dropped
  int Compare(const Version& o) const {
    for (auto [a, b] : {std::pair{major, o.major}, {minor, o.minor}, {patch, o.patch}}) {
      if (a != b) return a < b ? -1 : 1;
    }
    if (pre == o.pre) return 0;
    if (pre.empty()) return 1;  // a release is above its pre-releases
    if (o.pre.empty()) return -1;
    return pre < o.pre ? -1 : 1;
  }
};

std::optional<Version> ParseVersion(const std::string& text) {
  Version v;
  std::string core = text.substr(0, text.find('+'));
  const size_t dash = core.find('-');
  if (dash != std::string::npos) {
    v.pre = core.substr(dash + 1);
    core = core.substr(0, dash);
  }
  int64_t* parts[] = {&v.major, &v.minor, &v.patch};
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t end = core.find('.', pos);
    const std::string p =
        core.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (p.empty() || p.size() > 18 || !std::all_of(p.begin(), p.end(), ::isdigit))
      return std::nullopt;
    *parts[i] = std::stoll(p);
    if ((i < 2) != (end != std::string::npos)) return std::nullopt;
    pos = end + 1;
  }
  return v;
}

enum class Domain { kAttributes, kCapacity };
struct DomainMap {
  Domain of;
  std::string domain;
};
struct Root {};  // `device`
struct RootMap {
  Domain of;
};  // device.attributes, device.capacity
struct QuantityValue {
  int64_t milli;
};
struct List;

using Value = std::variant<std::monostate, bool, int64_t, std::string, QuantityValue, Version, Root,
                           RootMap, DomainMap, std::shared_ptr<List>>;
struct List {
  std::vector<Value> items;
};

std::string TypeName(const Value& v) {
  static const char* names[] = {"null",    "bool",   "int", "string", "quantity",
                                "version", "device", "map", "map",    "list"};
  return names[v.index()];
}

bool Equal(const Value& a, const Value& b) {
  if (a.index() != b.index()) return false;
  if (auto* q = std::get_if<QuantityValue>(&a)) return q->milli == std::get<QuantityValue>(b).milli;
  if (auto* v = std::get_if<Version>(&a)) return v->Compare(std::get<Version>(b)) == 0;
  if (auto* l = std::get_if<std::shared_ptr<List>>(&a)) {
    const auto& r = std::get<std::shared_ptr<List>>(b);
    if ((*l)->items.size() != r->items.size()) return false;
    for (size_t i = 0; i < r->items.size(); ++i) {
      if (!Equal((*l)->items[i], r->items[i])) return false;
    }
    return true;
  }
  if (std::holds_alternative<bool>(a)) return std::get<bool>(a) == std::get<bool>(b);
  if (std::holds_alternative<int64_t>(a)) return std::get<int64_t>(a) == std::get<int64_t>(b);
  if (std::holds_alternative<std::string>(a))
    return std::get<std::string>(a) == std::get<std::string>(b);
  return std::holds_alternative<std::monostate>(a);
}

// ---- syntax ----
enum class Tok { kEnd, kIdent, kInt, kString, kOp };
struct Token {
  Tok kind = Tok::kEnd;
  std::string text;
  int64_t number = 0;
  size_t pos = 0;
};

Result<std::vector<Token>> Lex(const std::string& s) {
  std::vector<Token> out;
  size_t i = 0;
  auto fail = [&](const std::string& why) {
    return Result<std::vector<Token>>::Error("CEL expression \"" + s + "\", position " +
                                             std::to_string(i + 1) + ": " + why);
  };
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    Token t;
    t.pos = i;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      t.kind = Tok::kIdent;
      t.text = s.substr(i, j - i);
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      if (j - i > 18) return fail("number too long");
      t.kind = Tok::kInt;
      t.number = std::stoll(s.substr(i, j - i));
      if (j < s.size() && (s[j] == 'u' || s[j] == 'U')) ++j;  // an unsigned literal, as an int
      i = j;
    } else if (c == '"' || c == '\'') {
      size_t j = i + 1;
      std::string text;
      while (j < s.size() && s[j] != c) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          const char e = s[++j];
          text += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        } else {
          text += s[j];
        }
        ++j;
      }
      if (j >= s.size()) return fail("unterminated string");
      t.kind = Tok::kString;
      t.text = text;
      i = j + 1;
    } else {
      static const char* ops[] = {"==", "!=", "<=", ">=", "&&", "||", "<", ">", "!",
                                  "(",  ")",  "[",  "]",  ".",  ",",  "?", ":", "-"};
      bool found = false;
      for (const char* op : ops) {
        if (s.compare(i, std::strlen(op), op) == 0) {
          t.kind = Tok::kOp;
          t.text = op;
          i += std::strlen(op);
          found = true;
          break;
        }
      }
      if (!found)
        return fail(std::string("unexpected '") + c + "' (not in the CEL subset Tessera reads)");
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.pos = s.size();
  out.push_back(end);
  return out;
}

}  // namespace

struct CelProgram::Node {
  enum Kind {
    kLiteral,
    kIdent,
    kMember,
    kIndex,
    kCall,
    kMethod,
    kUnary,
    kBinary,
    kTernary,
    kList,
    kHas
  };
  Kind kind;
  std::string name;  // identifier, member, function, method or operator
  Value literal;
  std::vector<std::shared_ptr<const Node>> args;  // operands, receiver first for methods
};

namespace {

using NodePtr = std::shared_ptr<const CelProgram::Node>;
using Node = CelProgram::Node;

class Parser {
 public:
  Parser(const std::string& text, std::vector<Token> tokens) : text_(text), t_(std::move(tokens)) {}

  Result<NodePtr> Parse() {
    auto e = Expr();
    if (!e.ok()) return e;
    if (Peek().kind != Tok::kEnd)
      return Fail("unexpected \"" + Peek().text + "\" after the expression");
    return e;
  }

 private:
  const Token& Peek() const { return t_[i_]; }
  bool IsOp(const char* op) const { return Peek().kind == Tok::kOp && Peek().text == op; }
  bool Accept(const char* op) {
    if (!IsOp(op)) return false;
    ++i_;
    return true;
  }
  Result<NodePtr> Fail(const std::string& why) const {
    return Result<NodePtr>::Error("CEL expression \"" + text_ + "\", position " +
                                  std::to_string(Peek().pos + 1) + ": " + why);
  }
  static NodePtr Make(Node::Kind kind, std::string name, std::vector<NodePtr> args, Value v = {}) {
    auto n = std::make_shared<Node>();
    n->kind = kind;
    n->name = std::move(name);
    n->args = std::move(args);
    n->literal = std::move(v);
    return n;
  }

  Result<NodePtr> Expr() {
    auto cond = Or();
    if (!cond.ok() || !Accept("?")) return cond;
    auto a = Expr();
    if (!a.ok()) return a;
    if (!Accept(":")) return Fail("expected ':' of a conditional");
    auto b = Expr();
    if (!b.ok()) return b;
    return Make(Node::kTernary, "?:", {*cond, *a, *b});
  }
  Result<NodePtr> Or() {
    auto l = And();
    while (l.ok() && IsOp("||")) {
      ++i_;
      auto r = And();
      if (!r.ok()) return r;
      l = Make(Node::kBinary, "||", {*l, *r});
    }
    return l;
  }
  Result<NodePtr> And() {
    auto l = Relation();
    while (l.ok() && IsOp("&&")) {
      ++i_;
      auto r = Relation();
      if (!r.ok()) return r;
      l = Make(Node::kBinary, "&&", {*l, *r});
    }
    return l;
  }
  Result<NodePtr> Relation() {
    auto l = Unary();
    if (!l.ok()) return l;
    for (const char* op : {"==", "!=", "<=", ">=", "<", ">"}) {
      if (IsOp(op)) {
        ++i_;
        auto r = Unary();
        if (!r.ok()) return r;
        return Make(Node::kBinary, op, {*l, *r});
      }
    }
    if (Peek().kind == Tok::kIdent && Peek().text == "in") {
      ++i_;
      auto r = Unary();
      if (!r.ok()) return r;
      return Make(Node::kBinary, "in", {*l, *r});
    }
    return l;
  }
  Result<NodePtr> Unary() {
    if (Accept("!")) {
      auto e = Unary();
      if (!e.ok()) return e;
      return Make(Node::kUnary, "!", {*e});
    }
    if (Accept("-")) {
      if (Peek().kind != Tok::kInt) return Fail("'-' is read only before a number");
      const int64_t v = -Peek().number;
      ++i_;
      return Postfix(Make(Node::kLiteral, "", {}, Value(v)));
    }
    auto p = Primary();
    if (!p.ok()) return p;
    return Postfix(*p);
  }
  Result<NodePtr> Postfix(NodePtr e) {
    for (;;) {
      if (Accept(".")) {
        if (Peek().kind != Tok::kIdent) return Fail("expected a name after '.'");
        std::string name = Peek().text;
        ++i_;
        if (Accept("(")) {
          auto args = Args(")");
          if (!args.ok()) return args.status();
          std::vector<NodePtr> all = {e};
          all.insert(all.end(), args->begin(), args->end());
          e = Make(Node::kMethod, name, std::move(all));
        } else {
          e = Make(Node::kMember, name, {e});
        }
      } else if (Accept("[")) {
        auto key = Expr();
        if (!key.ok()) return key;
        if (!Accept("]")) return Fail("expected ']'");
        e = Make(Node::kIndex, "[]", {e, *key});
      } else {
        return e;
      }
    }
  }
  Result<std::vector<NodePtr>> Args(const char* close) {
    std::vector<NodePtr> out;
    if (Accept(close)) return out;
    for (;;) {
      auto a = Expr();
      if (!a.ok()) return a.status();
      out.push_back(*a);
      if (Accept(close)) return out;
      if (!Accept(","))
        return Result<std::vector<NodePtr>>::Error(
            Fail(std::string("expected ',' or '") + close + "'").error());
    }
  }
  Result<NodePtr> Primary() {
    const Token t = Peek();
    if (t.kind == Tok::kInt) {
      ++i_;
      return Make(Node::kLiteral, "", {}, Value(t.number));
    }
    if (t.kind == Tok::kString) {
      ++i_;
      return Make(Node::kLiteral, "", {}, Value(t.text));
    }
    if (Accept("(")) {
      auto e = Expr();
      if (!e.ok()) return e;
      if (!Accept(")")) return Fail("expected ')'");
      return e;
    }
    if (Accept("[")) {
      auto items = Args("]");
      if (!items.ok()) return items.status();
      return Make(Node::kList, "[]", *items);
    }
    if (t.kind != Tok::kIdent)
      return Fail(t.kind == Tok::kEnd ? "the expression ends too early"
                                      : "unexpected \"" + t.text + "\"");
    ++i_;
    if (t.text == "true" || t.text == "false")
      return Make(Node::kLiteral, "", {}, Value(t.text == "true"));
    if (t.text == "null") return Make(Node::kLiteral, "", {}, Value());
    if (Accept("(")) {
      auto args = Args(")");
      if (!args.ok()) return args.status();
      static const char* kFunctions[] = {"has", "quantity", "semver", "size", "int", "string"};
      if (std::find(std::begin(kFunctions), std::end(kFunctions), t.text) == std::end(kFunctions)) {
        return Fail("function " + t.text + "() is not in the CEL subset Tessera reads");
      }
      if (t.text == "has") {
        if (args->size() != 1 || (*args)[0]->kind != Node::kMember) {
          return Fail(
              "has() takes one field selection, such as has(device.attributes[\"d\"].name)");
        }
        return Make(Node::kHas, "has", *args);
      }
      return Make(Node::kCall, t.text, *args);
    }
    if (t.text != "device")
      return Fail("unknown name \"" + t.text + "\"; a selector sees `device`");
    return Make(Node::kIdent, t.text, {});
  }

  const std::string& text_;
  std::vector<Token> t_;
  size_t i_ = 0;
};

// ---- evaluation ----
class Evaluator {
 public:
  explicit Evaluator(const CelDevice& d) : d_(d) {}

  Result<Value> Eval(const Node& n) {
    switch (n.kind) {
      case Node::kLiteral:
        return n.literal;
      case Node::kIdent:
        return Value(Root{});
      case Node::kList: {
        auto list = std::make_shared<List>();
        for (const NodePtr& a : n.args) {
          auto v = Eval(*a);
          if (!v.ok()) return v;
          list->items.push_back(*v);
        }
        return Value(list);
      }
      case Node::kMember:
      case Node::kIndex:
        return Select(n, false);
      case Node::kHas: {
        auto v = Select(*n.args[0], true);
        if (!v.ok()) return v;
        return v;
      }
      case Node::kUnary: {
        auto v = Eval(*n.args[0]);
        if (!v.ok()) return v;
        if (!std::holds_alternative<bool>(*v))
          return Err("'!' wants a bool, not a " + TypeName(*v));
        return Value(!std::get<bool>(*v));
      }
      case Node::kTernary: {
        auto c = Eval(*n.args[0]);
        if (!c.ok()) return c;
        if (!std::holds_alternative<bool>(*c))
          return Err("a conditional wants a bool, not a " + TypeName(*c));
        return Eval(*n.args[std::get<bool>(*c) ? 1 : 2]);
      }
      case Node::kBinary:
        return Binary(n);
      case Node::kCall:
        return Call(n);
      case Node::kMethod:
        return Method(n);
    }
    return Err("internal: unknown node");
  }

 private:
  static Result<Value> Err(const std::string& why) { return Result<Value>::Error(why); }

  // device.x, map["k"], domain.name; with `presence`, a bool saying whether the field exists.
  Result<Value> Select(const Node& n, bool presence) {
    auto base = Eval(*n.args[0]);
    if (!base.ok()) return base;
    std::string key = n.name;
    if (n.kind == Node::kIndex) {
      auto k = Eval(*n.args[1]);
      if (!k.ok()) return k;
      if (!std::holds_alternative<std::string>(*k))
        return Err("a map key must be a string, not a " + TypeName(*k));
      key = std::get<std::string>(*k);
    }
    if (std::holds_alternative<Root>(*base)) {
      if (key == "driver") return presence ? Value(true) : Value(d_.driver);
      if (key == "allowMultipleAllocations")
        return presence ? Value(true) : Value(d_.allow_multiple_allocations);
      if (key == "attributes") return presence ? Value(true) : Value(RootMap{Domain::kAttributes});
      if (key == "capacity") return presence ? Value(true) : Value(RootMap{Domain::kCapacity});
      return presence ? Value(false) : Err("no such key: " + key);
    }
    if (auto* root = std::get_if<RootMap>(&*base)) {
      return presence ? Value(true) : Value(DomainMap{root->of, key});  // unknown domains are empty
    }
    if (auto* dm = std::get_if<DomainMap>(&*base)) {
      const Json& map = dm->of == Domain::kAttributes ? d_.attributes : d_.capacity;
      const Json* found = nullptr;
      const std::string qualified = dm->domain + "/" + key;
      if (map.contains(qualified)) found = &map[qualified];
      if (found == nullptr && dm->domain == d_.driver && map.contains(key)) found = &map[key];
      if (presence) return Value(found != nullptr);
      if (found == nullptr) return Err("no such key: " + key);
      return Typed(*found, dm->of, qualified);
    }
    return Err("cannot select \"" + key + "\" of a " + TypeName(*base));
  }

  Result<Value> Typed(const Json& v, Domain of, const std::string& name) {
    if (of == Domain::kCapacity) {
      if (!v.is_object() || !v.contains("value") || !v["value"].is_string())
        return Err("capacity " + name + " has no value");
      return QuantityOf(v["value"].get<std::string>());
    }
    if (v.contains("int") && v["int"].is_number_integer()) return Value(v["int"].get<int64_t>());
    if (v.contains("bool") && v["bool"].is_boolean()) return Value(v["bool"].get<bool>());
    if (v.contains("string") && v["string"].is_string())
      return Value(v["string"].get<std::string>());
    if (v.contains("version") && v["version"].is_string()) {
      auto parsed = ParseVersion(v["version"].get<std::string>());
      if (!parsed) return Err("attribute " + name + " is no semantic version");
      return Value(*parsed);
    }
    return Err("attribute " + name + " has a type this evaluator does not read");
  }

  static Result<Value> QuantityOf(const std::string& text) {
    auto q = Quantity::Parse(text, "quantity");
    if (!q.ok()) return Err(q.error());
    auto milli = q->Scaled(3, "quantity");
    if (!milli.ok()) return Err(milli.error());
    return Value(QuantityValue{*milli});
  }

  Result<Value> Binary(const Node& n) {
    if (n.name == "&&" || n.name == "||") {
      // CEL's logic: a decided side wins over an error on the other.
      const bool is_and = n.name == "&&";
      auto l = Eval(*n.args[0]);
      if (l.ok() && std::holds_alternative<bool>(*l) && std::get<bool>(*l) != is_and) return *l;
      auto r = Eval(*n.args[1]);
      if (r.ok() && std::holds_alternative<bool>(*r) && std::get<bool>(*r) != is_and) return *r;
      if (!l.ok()) return l;
      if (!r.ok()) return r;
      if (!std::holds_alternative<bool>(*l) || !std::holds_alternative<bool>(*r)) {
        return Err("'" + n.name + "' wants bools, not " + TypeName(*l) + " and " + TypeName(*r));
      }
      return Value(is_and);
    }
    auto l = Eval(*n.args[0]);
    if (!l.ok()) return l;
    auto r = Eval(*n.args[1]);
    if (!r.ok()) return r;
    if (n.name == "in") {
      auto* list = std::get_if<std::shared_ptr<List>>(&*r);
      if (list == nullptr) return Err("'in' wants a list, not a " + TypeName(*r));
      for (const Value& item : (*list)->items) {
        if (Equal(*l, item)) return Value(true);
      }
      return Value(false);
    }
    if (n.name == "==") return Value(Equal(*l, *r));
    if (n.name == "!=") return Value(!Equal(*l, *r));
    int cmp = 0;
    if (std::holds_alternative<int64_t>(*l) && std::holds_alternative<int64_t>(*r)) {
      cmp = std::get<int64_t>(*l) < std::get<int64_t>(*r)
                ? -1
                : std::get<int64_t>(*l) > std::get<int64_t>(*r);
    } else if (std::holds_alternative<std::string>(*l) && std::holds_alternative<std::string>(*r)) {
      cmp = std::get<std::string>(*l).compare(std::get<std::string>(*r));
    } else if (std::holds_alternative<bool>(*l) && std::holds_alternative<bool>(*r)) {
      cmp = static_cast<int>(std::get<bool>(*l)) - static_cast<int>(std::get<bool>(*r));
    } else {
      return Err("no such overload: " + TypeName(*l) + " " + n.name + " " + TypeName(*r) +
                 " (quantities and versions compare with compareTo)");
    }
    if (n.name == "<") return Value(cmp < 0);
    if (n.name == "<=") return Value(cmp <= 0);
    if (n.name == ">") return Value(cmp > 0);
    return Value(cmp >= 0);
  }

  Result<Value> Call(const Node& n) {
    if (n.args.size() != 1) return Err(n.name + "() takes one argument");
    auto a = Eval(*n.args[0]);
    if (!a.ok()) return a;
    if (n.name == "quantity" || n.name == "semver") {
      auto* s = std::get_if<std::string>(&*a);
      if (s == nullptr) return Err(n.name + "() wants a string");
      if (n.name == "quantity") return QuantityOf(*s);
      auto v = ParseVersion(*s);
      if (!v) return Err("semver(\"" + *s + "\"): not a semantic version");
      return Value(*v);
    }
    if (n.name == "size") return Size(*a);
    if (n.name == "string") {
      if (auto* i = std::get_if<int64_t>(&*a)) return Value(std::to_string(*i));
      if (auto* s = std::get_if<std::string>(&*a)) return Value(*s);
      if (auto* b = std::get_if<bool>(&*a)) return Value(std::string(*b ? "true" : "false"));
      return Err("string() of a " + TypeName(*a));
    }
    // int()
    if (auto* i = std::get_if<int64_t>(&*a)) return Value(*i);
    if (auto* s = std::get_if<std::string>(&*a)) {
      if (s->empty() || s->size() > 18 ||
          !std::all_of(s->begin() + (s->front() == '-'), s->end(), ::isdigit)) {
        return Err("int(\"" + *s + "\"): not a number");
      }
      return Value(static_cast<int64_t>(std::stoll(*s)));
    }
    return Err("int() of a " + TypeName(*a));
  }

  static Result<Value> Size(const Value& v) {
    if (auto* s = std::get_if<std::string>(&v)) return Value(static_cast<int64_t>(s->size()));
    if (auto* l = std::get_if<std::shared_ptr<List>>(&v))
      return Value(static_cast<int64_t>((*l)->items.size()));
    return Err("size() of a " + TypeName(v));
  }

  Result<Value> Method(const Node& n) {
    auto recv = Eval(*n.args[0]);
    if (!recv.ok()) return recv;
    std::vector<Value> args;
    for (size_t i = 1; i < n.args.size(); ++i) {
      auto a = Eval(*n.args[i]);
      if (!a.ok()) return a;
      args.push_back(*a);
    }
    auto want = [&](size_t count) {
      return args.size() == count
                 ? Status::Ok()
                 : Status::Error(n.name + "() takes " + std::to_string(count) + " argument(s)");
    };
    if (n.name == "size") {
      if (Status s = want(0); !s.ok()) return s;
      return Size(*recv);
    }
    if (n.name == "includes") {
      if (Status s = want(1); !s.ok()) return s;
      return Value(Equal(*recv, args[0]));
    }
    if (auto* s = std::get_if<std::string>(&*recv)) {
      if (n.name == "lowerAscii") {
        std::string lower = *s;
        for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return Value(lower);
      }
      if (Status st = want(1); !st.ok()) return st;
      auto* p = std::get_if<std::string>(&args[0]);
      if (p == nullptr) return Err(n.name + "() wants a string");
      if (n.name == "startsWith") return Value(s->rfind(*p, 0) == 0);
      if (n.name == "endsWith")
        return Value(s->size() >= p->size() &&
                     s->compare(s->size() - p->size(), p->size(), *p) == 0);
      if (n.name == "contains") return Value(s->find(*p) != std::string::npos);
      return Err("no method " + n.name + "() on a string in the CEL subset Tessera reads");
    }
    const bool quantity = std::holds_alternative<QuantityValue>(*recv);
    const bool version = std::holds_alternative<Version>(*recv);
    if (quantity || version) {
      if (n.name == "asInteger" && quantity) {
        const int64_t milli = std::get<QuantityValue>(*recv).milli;
        if (milli % 1000 != 0) return Err("asInteger() of a quantity with a fraction");
        return Value(milli / 1000);
      }
      if (Status st = want(1); !st.ok()) return st;
      if (args[0].index() != recv->index())
        return Err(n.name + "() compares a " + TypeName(*recv) + " with a " + TypeName(args[0]));
      int cmp;
      if (quantity) {
        const int64_t a = std::get<QuantityValue>(*recv).milli,
                      b = std::get<QuantityValue>(args[0]).milli;
        cmp = a < b ? -1 : a > b;
      } else {
        cmp = std::get<Version>(*recv).Compare(std::get<Version>(args[0]));
      }
      if (n.name == "compareTo") return Value(static_cast<int64_t>(cmp));
      if (n.name == "isGreaterThan") return Value(cmp > 0);
      if (n.name == "isLessThan") return Value(cmp < 0);
    }
    return Err("no method " + n.name + "() on a " + TypeName(*recv) +
               " in the CEL subset Tessera reads");
  }

  const CelDevice& d_;
};

}  // namespace

CelDevice CelDevice::FromSliceDevice(const std::string& driver, const Json& device) {
  CelDevice d;
  d.driver = driver;
  d.attributes = device.value("attributes", Json::object());
  d.capacity = device.value("capacity", Json::object());
  d.allow_multiple_allocations = device.value("allowMultipleAllocations", false);
  return d;
}

Result<CelProgram> CelProgram::Compile(const std::string& expression) {
  if (expression.size() > 10 * 1024) {
    return Result<CelProgram>::Error("CEL expression of " + std::to_string(expression.size()) +
                                     " characters; at most 10240");
  }
  auto tokens = Lex(expression);
  if (!tokens.ok()) return tokens.status();
  Parser parser(expression, std::move(*tokens));
  auto root = parser.Parse();
  if (!root.ok()) return root.status();
  CelProgram p;
  p.expression_ = expression;
  p.root_ = *root;
  return p;
}

Result<bool> CelProgram::Matches(const CelDevice& device) const {
  Evaluator e(device);
  auto v = e.Eval(*root_);
  if (!v.ok()) return Result<bool>::Error(v.error());
  if (!std::holds_alternative<bool>(*v)) {
    return Result<bool>::Error("the expression gives a " + TypeName(*v) + ", not a bool");
  }
  return std::get<bool>(*v);
}

Result<const CelProgram*> CelCache::Get(const std::string& expression) {
  auto it = programs_.find(expression);
  if (it == programs_.end())
    it = programs_.emplace(expression, CelProgram::Compile(expression)).first;
  if (!it->second.ok()) return it->second.status();
  return &*it->second;
}

}  // namespace tessera::k8s::dra
