module example.com/preview-sample

go 1.19
