module github.com/cairn-s3/cairn/internal/bench/sqlitedrivers/work

go 1.26.0
