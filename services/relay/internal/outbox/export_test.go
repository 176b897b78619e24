package outbox

// DueSQL is Due's query, for the test that reads its plan.
const DueSQL = dueSQL
