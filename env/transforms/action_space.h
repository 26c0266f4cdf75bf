// Both action spaces an agent sees: the flat Discrete space with its mask (flat_space.h) and the
// LoopTune-style cursor space (cursor_space.h).
#pragma once

#include "transforms/cursor_space.h"
#include "transforms/flat_space.h"
