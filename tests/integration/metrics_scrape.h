// Reading a Prometheus endpoint in integration tests: GET /metrics, then
// the sum of the samples of one metric whose labels include a given text.
#ifndef GANTRY_TESTS_INTEGRATION_METRICS_SCRAPE_H_
#define GANTRY_TESTS_INTEGRATION_METRICS_SCRAPE_H_

#include <httplib.h>

#include <cmath>
#include <regex>
#include <sstream>
#include <string>

namespace gantry::testing {

// The exposition text, or a line saying why there is none.
inline std::string Scrape(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  auto res = client.Get("/metrics");
  if (!res) {
    return "scrape of port " + std::to_string(port) + " failed: " + httplib::to_string(res.error());
  }
  return res->status == 200 ? res->body : "HTTP " + std::to_string(res->status);
}

// The sum of every sample of `name` whose labels include `label` (e.g.
// endpoint="/count"); NaN when there is none.
inline double Sum(const std::string& exposition, const std::string& name,
                  const std::string& label) {
  const std::regex sample("^" + name + R"(\{([^}]*)\} ([0-9.eE+-]+)$)");
  double total = 0;
  bool found = false;
  std::istringstream lines(exposition);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, sample) && m[1].str().find(label) != std::string::npos) {
      total += std::stod(m[2].str());
      found = true;
    }
  }
  return found ? total : std::nan("");
}

}  // namespace gantry::testing

#endif  // GANTRY_TESTS_INTEGRATION_METRICS_SCRAPE_H_
