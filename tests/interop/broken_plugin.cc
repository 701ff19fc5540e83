// A plugin that needs a symbol nobody defines: dlopen(RTLD_NOW) must refuse
// it, and the worker must say which library and which symbol.
void GantryInteropSymbolThatDoesNotExist();

namespace {
struct CallsMissing {
  CallsMissing() { GantryInteropSymbolThatDoesNotExist(); }
};
CallsMissing calls_missing;
}  // namespace
