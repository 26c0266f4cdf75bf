// Writing bridge replies: the reply envelope and the JSON of the env's results (step, reset,
// spaces, state, validation), written with util::JsonWriter straight onto the reply string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "bridge/request.h"
#include "gym/env.h"
#include "gym/state.h"

namespace perfdojo::bridge {

/// {"id":..,"ok":true,"result":<result_json>}
std::string ok_reply(std::string_view id, std::string_view result_json);
/// {"id":..,"ok":false,"error":{"type":..,"message":..}}
std::string error_reply(std::string_view id, const Error& e);

/// How numeric observations (features, tokens) are written: JSON lists of numbers, or the
/// base64 of their little-endian bytes (float32, int32), which a client decodes in one call
/// instead of parsing hundreds of decimals (docs/bridge.md, OBS).
enum class ObservationFormat { kList, kBase64 };

/// {"features":[..],"tokens":[..],"ir_text":"..","graph":{..}}, only the spaces in `spaces`.
void write_observation(JsonWriter& w, const env::Observation& o,
                       const std::vector<std::string>& spaces,
                       ObservationFormat format = ObservationFormat::kList);
/// The Info fields (docs/bridge.md); the action mask as mask_base64.
void write_info(JsonWriter& w, const env::Info& info);
/// {"observation","reward","terminated","truncated","info"}
void write_step(JsonWriter& w, const env::StepResult& r, const std::vector<std::string>& spaces,
                ObservationFormat format = ObservationFormat::kList);
/// {"observation","info"}
void write_reset(JsonWriter& w, const env::Observation& o, const env::Info& info,
                 const std::vector<std::string>& spaces,
                 ObservationFormat format = ObservationFormat::kList);
/// {"action_space":{..},"observation_spaces":[..],"deterministic",..}
void write_spaces(JsonWriter& w, const env::Env& e);
/// The EpisodeState as a JSON object (field names as in state.h).
void write_state(JsonWriter& w, const env::EpisodeState& s);
/// The validate() verdict.
void write_validation(JsonWriter& w, const env::Validation& v);

}  // namespace perfdojo::bridge
