package app

// WSReadLimit is wsReadLimit for the tests of package app_test.
const WSReadLimit = wsReadLimit
