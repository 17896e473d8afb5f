#pragma once
// The whole public API of ckpt.

#include "ckpt/box.h"
#include "ckpt/buffer.h"
#include "ckpt/cast.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checksum.h"
#include "ckpt/diff.h"
#include "ckpt/dtype.h"
#include "ckpt/error.h"
#include "ckpt/format.h"
#include "ckpt/modules.h"
#include "ckpt/preload.h"
#include "ckpt/registry.h"
#include "ckpt/restore.h"
#include "ckpt/tensor.h"
#include "ckpt/transform.h"
#include "ckpt/tree.h"
