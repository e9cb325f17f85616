#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <string>

namespace gpupool {

Status InitLogging(std::string_view level) {
  const std::string name(level);
  const spdlog::level::level_enum parsed = spdlog::level::from_str(name);
  // from_str maps anything it does not know to "off"; only accept "off" when asked for.
  if (parsed == spdlog::level::off && name != "off") {
    return Status::InvalidArgument("unknown log level '" + name +
                                   "': use trace, debug, info, warn, error or off");
  }
  auto logger = spdlog::get("gpupool");
  if (!logger) logger = spdlog::stderr_color_mt("gpupool");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  return Status::Ok();
}

}  // namespace gpupool
