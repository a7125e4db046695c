module converge.dev/scripts/gomodzip

go 1.26.0

require golang.org/x/mod v0.41.0
