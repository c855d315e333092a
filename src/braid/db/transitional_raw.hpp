// TRANSITIONAL: the confirmations table on a raw connection, for the sqlite3* overloads of
// search/confirmation.hpp that src/braid/search/runner.cpp still calls with
// ProgramDatabase::handle(). Once runner.cpp calls the ProgramDatabase overloads, this header,
// those overloads and handle() go. Nothing else may include it.
#pragma once
#include <vector>

#include "braid/db/record.hpp"

struct sqlite3;

namespace braid::transitional {

void ensure_confirmations_table(sqlite3* db);
void insert_confirmation(sqlite3* db, const ConfirmationRecord& c);
std::vector<ConfirmationRecord> confirmations(sqlite3* db);

}  // namespace braid::transitional
