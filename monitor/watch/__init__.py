"""The Monitor every face holds (sampler -> window -> diagnosis -> report) and the report it hands out."""
