-- | The Clash compiler, built from the clash-ghc library so that
-- @cabal run clash -- ...@ works offline against Debian's packages.
--
-- It behaves like the @clash@ program, except that the K2C blocks of this
-- package are always on the search path (cabal points 'getDataDir' at this
-- package's source directory), so only the network's own folder needs @-i@.
module Main (main) where

import Clash.Main (defaultMain)
import Paths_keras2clash_blocks (getDataDir)
import System.Environment (getArgs)

main :: IO ()
main = do
  blocks <- getDataDir
  args   <- getArgs
  defaultMain (("-i" ++ blocks) : args)
