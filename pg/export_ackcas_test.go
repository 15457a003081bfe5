package pg

// AckCASSQL lets the external tests run the CAS statement on a connection
// of their own (the benchmark measures that connection's backend).
const AckCASSQL = ackCASSQL
