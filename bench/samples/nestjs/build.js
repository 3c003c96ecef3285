// The sample's build, as `nest build` would leave it: dist/main.js and what it reads.
const fs = require("fs");
fs.mkdirSync("dist", { recursive: true });
fs.copyFileSync("src/main.js", "dist/main.js");
fs.copyFileSync("message.txt", "dist/message.txt");
