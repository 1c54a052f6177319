// models/row_exchange.h's exchange over a Communicator (c10d's all-to-all: NCCL on GPUs, Gloo on CPU).
#pragma once
#include <memory>

#include "harness/dist/communicator.h"
#include "models/row_exchange.h"

namespace ufp4 {

std::shared_ptr<RowExchange> row_exchange(std::shared_ptr<Communicator> group);

}  // namespace ufp4
