// The shape of a Flow: which step takes whose output. Shared by the Flow
// (options built in C++) and the YAML loader, which words the same errors
// with file and line.
#ifndef GANTRY_CORE_FLOW_GRAPH_H_
#define GANTRY_CORE_FLOW_GRAPH_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace gantry::internal {

// The name that stands for the Flow's input in `needs`.
inline constexpr char kFlowGatewayName[] = "gateway";

struct FlowGraph {
  // Per step, the indices of the steps it takes output from; empty: the
  // client's request. Defaults are resolved (no needs: the previous step).
  std::vector<std::vector<std::size_t>> needs;
  // Step indices in an order where every step comes after its needs (the
  // given order wherever the needs allow).
  std::vector<std::size_t> order;
};

// What is wrong with a Flow's graph: the step, the key ("name" or "needs")
// with the index of the offending need (`need`), and what.
struct FlowGraphError {
  std::size_t step = 0;
  std::string key;
  std::optional<std::size_t> need;
  std::string message;
  // "executors[2].needs[0]" (or "executors[1].name").
  std::string Path() const;
};

// Checks names and needs and resolves them: a name must be non-empty, not
// "gateway" and unique; each need must name another step or "gateway",
// once; the graph must have no cycle. `needs[i]` empty means the default.
// Returns the first problem found, in step order.
struct FlowGraphResult {
  std::optional<FlowGraph> graph;
  std::optional<FlowGraphError> error;
};
FlowGraphResult ResolveFlowGraph(const std::vector<std::string>& names,
                                 const std::vector<std::vector<std::string>>& needs);

}  // namespace gantry::internal

#endif  // GANTRY_CORE_FLOW_GRAPH_H_
