"""Small pieces every layer may use, with no service state: names, flow control, safe reads and writes of a
checkout, the deployment log, labels, YAML and text helpers."""
