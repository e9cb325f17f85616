// docs/openapi.json, the OpenAPI description of the REST API, as it was when this binary
// was built: CMake embeds the file's bytes (cmake/embed_file.cmake), and the API serves
// them at GET /v1/openapi.json.
#pragma once

#include <string_view>

namespace gpupool::controller {

// The document's bytes; valid for the life of the program.
std::string_view OpenApiDocument();

}  // namespace gpupool::controller
