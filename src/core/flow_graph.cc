#include "core/flow_graph.h"

#include <map>

namespace gantry::internal {
namespace {

std::string Quote(const std::string& text) { return "'" + text + "'"; }

std::string Known(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) {
    out += name + ", ";
  }
  return out + kFlowGatewayName;
}

FlowGraphResult Fail(std::size_t step, std::string key, std::optional<std::size_t> need,
                     std::string message) {
  return {std::nullopt, FlowGraphError{step, std::move(key), need, std::move(message)}};
}

}  // namespace

std::string FlowGraphError::Path() const {
  std::string path = "executors[" + std::to_string(step) + "]." + key;
  if (need) {
    path += "[" + std::to_string(*need) + "]";
  }
  return path;
}

FlowGraphResult ResolveFlowGraph(const std::vector<std::string>& names,
                                 const std::vector<std::vector<std::string>>& needs) {
  const std::size_t n = names.size();
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < n; ++i) {
    if (names[i].empty()) {
      return Fail(i, "name", std::nullopt, "a step name must not be empty");
    }
    if (names[i] == kFlowGatewayName) {
      return Fail(i, "name", std::nullopt,
                  "'gateway' is reserved: it names the Flow's input in `needs`");
    }
    auto [it, inserted] = index.emplace(names[i], i);
    if (!inserted) {
      return Fail(i, "name", std::nullopt,
                  "duplicate step name " + Quote(names[i]) + " (also executors[" +
                      std::to_string(it->second) + "])");
    }
  }
  FlowGraph graph;
  graph.needs.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (i < needs.size() && !needs[i].empty()) {
      for (std::size_t k = 0; k < needs[i].size(); ++k) {
        const std::string& need = needs[i][k];
        for (std::size_t j = 0; j < k; ++j) {
          if (needs[i][j] == need) {
            return Fail(i, "needs", k,
                        "step " + Quote(names[i]) + " needs " + Quote(need) + " twice");
          }
        }
        if (need == kFlowGatewayName) {
          if (needs[i].size() > 1) {
            return Fail(i, "needs", k,
                        "step " + Quote(names[i]) +
                            ": 'gateway' cannot be merged with other needs (the client's "
                            "request is not a step's output)");
          }
          continue;
        }
        auto it = index.find(need);
        if (it == index.end()) {
          return Fail(i, "needs", k,
                      "step " + Quote(names[i]) + " needs unknown step " + Quote(need) +
                          " (steps: " + Known(names) + ")");
        }
        if (it->second == i) {
          return Fail(i, "needs", k, "step " + Quote(names[i]) + " needs itself (a cycle)");
        }
        graph.needs[i].push_back(it->second);
      }
    } else if (i > 0) {
      graph.needs[i].push_back(i - 1);
    }
  }
  // Kahn's algorithm, taking the lowest ready index first so that a chain
  // keeps its given order.
  std::vector<std::size_t> waiting(n);
  std::vector<std::vector<std::size_t>> dependents(n);
  for (std::size_t i = 0; i < n; ++i) {
    waiting[i] = graph.needs[i].size();
    for (std::size_t need : graph.needs[i]) {
      dependents[need].push_back(i);
    }
  }
  std::vector<bool> done(n, false);
  while (graph.order.size() < n) {
    std::optional<std::size_t> next;
    for (std::size_t i = 0; i < n && !next; ++i) {
      if (!done[i] && waiting[i] == 0) {
        next = i;
      }
    }
    if (!next) {
      break;
    }
    done[*next] = true;
    graph.order.push_back(*next);
    for (std::size_t d : dependents[*next]) {
      --waiting[d];
    }
  }
  if (graph.order.size() < n) {
    // Walk back along needs among the steps left until one repeats.
    std::size_t at = 0;
    while (done[at]) {
      ++at;
    }
    std::vector<std::size_t> path;
    std::vector<int> seen_at(n, -1);
    while (seen_at[at] < 0) {
      seen_at[at] = static_cast<int>(path.size());
      path.push_back(at);
      for (std::size_t need : graph.needs[at]) {
        if (!done[need]) {
          at = need;
          break;
        }
      }
    }
    // path[seen_at[at]..] is the cycle, each step needing the next.
    std::string cycle;
    std::size_t first = path[static_cast<std::size_t>(seen_at[at])];
    for (std::size_t k = static_cast<std::size_t>(seen_at[at]); k < path.size(); ++k) {
      cycle += Quote(names[path[k]]) + " needs ";
    }
    cycle += Quote(names[first]);
    std::size_t second = path.size() > static_cast<std::size_t>(seen_at[at]) + 1
                             ? path[static_cast<std::size_t>(seen_at[at]) + 1]
                             : first;
    std::optional<std::size_t> need_index;
    for (std::size_t k = 0; first < needs.size() && k < needs[first].size(); ++k) {
      if (needs[first][k] == names[second]) {
        need_index = k;
      }
    }
    return Fail(first, "needs", need_index, "the steps form a cycle: " + cycle);
  }
  return {std::move(graph), std::nullopt};
}

}  // namespace gantry::internal
