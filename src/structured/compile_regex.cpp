#include "structured/compile.h"

namespace deepinfer::structured {

StatusOr<std::shared_ptr<CompiledGrammar>> compile_regex(const std::string& pattern) {
  GrammarBuilder b;
  DI_ASSIGN_OR_RETURN(int t, b.add_regex(pattern));
  int start = b.seq({GrammarBuilder::terminal_symbol(t)}, "root");
  return CompiledGrammar::compile(std::move(b), start);
}

}  // namespace deepinfer::structured
