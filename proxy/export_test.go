package proxy

// CommandNameForTest exposes commandName to the black-box tests.
var CommandNameForTest = commandName
