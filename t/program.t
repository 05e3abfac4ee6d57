-- program (being written)
local t = require "tap"
t.skip_all("not written yet")
