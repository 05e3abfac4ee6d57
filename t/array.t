local t = require "tap"; t.skip_all("placeholder")
