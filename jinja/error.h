// The one exception type of the Jinja interpreter. Every error names the
// template and the line it comes from, so a bad chat template from the Hub
// points at its own source: "template 'chat_template' line 3: unknown tag 'foo'".
#pragma once

#include <exception>
#include <string>

namespace fptrain::jinja {

class Error : public std::exception {
 public:
  enum class Kind {
    kSyntax,     // the template does not parse (or names an unknown filter/test)
    kUndefined,  // an undefined value was used (called, indexed, added to...)
    kType,       // an operation on the wrong kind of value ("a" + 1, len(5), ...)
    kSecurity,   // the sandbox refused (e.g. list.append)
    kRuntime,    // anything else at render time (bad argument, recursion, ...)
    kRaised,     // the template called raise_exception(message)
  };

  Error(Kind kind, std::string message);

  Kind kind() const { return kind_; }
  // What went wrong, without the location; for kRaised exactly the template's message.
  const std::string& message() const { return message_; }
  const std::string& template_name() const { return template_name_; }
  int line() const { return line_; }  // 0: no line (or not located yet)
  bool located() const { return located_; }
  // Attaches the location, once: the innermost construct that failed keeps its line.
  // line 0 names the template only (e.g. a problem with the context).
  void locate(const std::string& template_name, int line);

  const char* what() const noexcept override { return what_.c_str(); }

 private:
  Kind kind_;
  std::string message_;
  std::string template_name_;
  int line_ = 0;
  bool located_ = false;
  std::string what_;
};

}  // namespace fptrain::jinja
