// The JSON parser the bridge reads requests with: the rapidjson that cereal depends on (Debian's
// libcereal-dev uses the system rapidjson-dev; upstream cereal bundles a copy), so no new
// dependency. It is compiled into a namespace of its own, with assertions that throw, so its
// templates never clash with cereal's instantiations and a missed type check cannot abort the
// server. Do not include cereal/archives/json.hpp in the same translation unit.
#pragma once

#include <stdexcept>

#define RAPIDJSON_HAS_STDSTRING 1
#define RAPIDJSON_ASSERT_THROWS 1
#define RAPIDJSON_ASSERT(x) \
  if (!(x)) throw std::logic_error("rapidjson assertion failed: " #x)

#if __has_include(<rapidjson/document.h>)
#define RAPIDJSON_NAMESPACE perfdojo_rapidjson
#define RAPIDJSON_NAMESPACE_BEGIN namespace perfdojo_rapidjson {
#define RAPIDJSON_NAMESPACE_END }
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#else
#define CEREAL_RAPIDJSON_NAMESPACE perfdojo_rapidjson
#define CEREAL_RAPIDJSON_NAMESPACE_BEGIN namespace perfdojo_rapidjson {
#define CEREAL_RAPIDJSON_NAMESPACE_END }
#define CEREAL_RAPIDJSON_ASSERT(x) RAPIDJSON_ASSERT(x)
#include <cereal/external/rapidjson/document.h>
#include <cereal/external/rapidjson/error/en.h>
#endif

namespace perfdojo::bridge {
/// The parser's namespace.
namespace json = ::perfdojo_rapidjson;
}  // namespace perfdojo::bridge
