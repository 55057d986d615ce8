{-# LANGUAGE ImplicitPrelude, DataKinds, KindSignatures, ScopedTypeVariables, TypeApplications,
             TypeOperators, FlexibleContexts, ExplicitNamespaces, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The simulation harness behind every emitted @Sim.hs@ (not synthesized).

Sim protocol (docs/architecture.md): stdin holds @N@, then @N@ lines of the
flattened input's raw integers; stdout gets @N@ lines
@accept_cycle output_cycle class raw_0 ... raw_{m-1}@. Cycles count from the
first cycle after reset. Each input is held until the network's ready takes
it. By default inputs come back to back and downstream is always ready;
@--gap-max K --seed S@ inserts 0..K idle cycles before each input and holds
downstream ready low for 0..K cycles before each ready cycle (pseudo-random,
reproducible from @S@).

If the outputs have not all appeared within a cycle budget the harness says so
on stderr and exits with code 1 rather than hanging.
-}
module K2C.Sim
  ( TopEntity
  , simMain
  ) where

import Clash.Prelude
  ( Clock, Enable, Index, KnownNat, Reset, SFixed, SNat (..), Signed, Signal
  , System, Vec, clockGen, enableGen, indicesI, natToNum, resetGenN, sf
  , toList, unSF )
import Clash.Signal.Internal (Signal ((:-)))
import Control.Monad (when)
import Data.Bits (shiftR, xor)
import Data.Maybe (isJust)
import Data.Word (Word64)
import GHC.TypeLits (type (+))
import System.Environment (getArgs)
import System.Exit (ExitCode (..), exitWith)
import System.IO (BufferMode (..), hPutStrLn, hSetBuffering, stderr, stdout)

-- | The shape of an emitted top entity: input vector of @n@ values in
-- @SFixed ai af@, output scores of @m@ values in @SFixed oi fo@ with the class.
type TopEntity n ai af m oi fo
  =  Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec n (SFixed ai af)))
  -> Signal System Bool
  -> (Signal System (Maybe (Vec m (SFixed oi fo), Index m)), Signal System Bool)

-- | Cycles the reset is held at the start; the protocol's cycle 0 follows them.
type ResetCycles = 1

resetCycles :: Int
resetCycles = natToNum @ResetCycles

-- | The cycle budget is @fixedSlack + N * perWordSlack * (romWords + gapMax)@:
-- generous (a sample needs about @romWords + 2 * layers@ cycles), but finite.
fixedSlack, perWordSlack :: Int
fixedSlack   = 1000
perWordSlack = 100

-- | Command-line options.
data Options = Options { gapMax :: Int, seed :: Word64 }

-- | Run the Sim protocol on a top entity. @romWords@ is the sum of the layers'
-- ROM word counts; it sizes the cycle budget.
simMain
  :: forall n ai af m oi fo
   . (KnownNat n, KnownNat ai, KnownNat af, KnownNat m, KnownNat oi, KnownNat fo)
  => TopEntity n ai af m oi fo -> Int -> IO ()
simMain top romWords = do
  options <- parseOptions <$> getArgs
  samples <- parseSamples <$> getContents
  inputs  <- either failWith pure (traverse (toFixed @ai @af) samples)
  hSetBuffering stdout LineBuffering
  let count  = length inputs
      budget = fixedSlack + count * perWordSlack * (romWords + gapMax options)
  printed <- report count (zip [0 ..] (take budget (trace top options inputs)))
  when (printed < count) $
    failWith ("simulation: " ++ show printed ++ " of " ++ show count
              ++ " outputs within " ++ show budget ++ " cycles")

-- | The cycle-by-cycle trace (input, in_ready, output, out_ready) after reset,
-- with the inputs driven through the network's ready and downstream readiness
-- from the options.
trace
  :: TopEntity n ai af m oi fo -> Options -> [Vec n (SFixed ai af)]
  -> [(Maybe (Vec n (SFixed ai af)), Bool, Maybe (Vec m (SFixed oi fo), Index m), Bool)]
trace top options inputs =
  drop resetCycles (zip4 (signalList input) (signalList readyIn)
                         (signalList output) (signalList readyOut))
  where
    (output, readyIn) = top clockGen (resetGenN (SNat @ResetCycles)) enableGen input readyOut
    input    = drive (replicate resetCycles Nothing ++ schedule) readyIn
    schedule = concat (zipWith (\gap x -> replicate gap Nothing ++ [Just x])
                               (gaps (seed options)) inputs)
    readyOut = fromList (replicate resetCycles True
                         ++ concatMap (\gap -> replicate gap False ++ [True])
                                      (gaps (seed options `xor` 0x5bd1e995)))
    gaps     = map (`mod` (gapMax options + 1)) . randoms

-- | One pass over the trace, printing each sample's line the cycle its output
-- beat moves (so a caller can show progress), until @wanted@ lines are out or
-- the trace ends; returns how many were printed. Accepts are first-in
-- first-out, so the pending accept cycles form a short queue (at most the
-- pipeline's depth). Nothing else holds the trace, so memory stays constant.
report
  :: (KnownNat m, KnownNat oi, KnownNat fo)
  => Int -> [(Int, (Maybe x, Bool, Maybe (Vec m (SFixed oi fo), Index m), Bool))] -> IO Int
report wanted = go [] 0
  where
    go pending printed steps
      | printed == wanted = pure printed
      | otherwise = case steps of
          [] -> pure printed
          (t, (input, readyIn, output, readyOut)) : rest -> do
            let pending' | isJust input && readyIn = pending ++ [t]
                         | otherwise               = pending
            case (output, pending') of
              (Just result, accept : later) | readyOut -> do
                putStrLn (line accept t result)
                go later (printed + 1) rest
              _ -> length pending' `seq` go pending' printed rest
    line accept moved (scores, cls) = unwords
      (show accept : show moved : show (fromEnum cls) : map (show . toInteger . unSF) (toList scores))

-- | An input signal that shows each scheduled beat until it moves; @Nothing@
-- entries are idle cycles and always pass.
drive :: [Maybe a] -> Signal System Bool -> Signal System (Maybe a)
drive items ~(ready :- readies) = case items of
  []                -> Nothing :- drive [] readies
  Nothing : rest    -> Nothing :- drive rest readies
  Just x : rest     -> Just x :- drive (if ready then rest else items) readies

fromList :: [a] -> Signal System a
fromList (x : xs) = x :- fromList xs
fromList []       = error "K2C.Sim.fromList: finite list"

signalList :: Signal System a -> [a]
signalList (x :- xs) = x : signalList xs

zip4 :: [a] -> [b] -> [c] -> [d] -> [(a, b, c, d)]
zip4 (a : as) (b : bs) (c : cs) (d : ds) = (a, b, c, d) : zip4 as bs cs ds
zip4 _ _ _ _ = []

-- | splitmix64: a small reproducible generator, so the harness needs no
-- package beyond base.
randoms :: Word64 -> [Int]
randoms = map (fromIntegral . (`shiftR` 33) . mix) . tail . iterate (+ 0x9e3779b97f4a7c15)
  where
    mix z0 = let z1 = (z0 `xor` (z0 `shiftR` 30)) * 0xbf58476d1ce4e5b9
                 z2 = (z1 `xor` (z1 `shiftR` 27)) * 0x94d049bb133111eb
             in  z2 `xor` (z2 `shiftR` 31)

parseOptions :: [String] -> Options
parseOptions = go (Options 0 1)
  where
    go o ("--gap-max" : k : rest) = go o { gapMax = read k } rest
    go o ("--seed" : s : rest)    = go o { seed = read s } rest
    go o []                       = o
    go _ other                    = error ("K2C.Sim: unknown arguments " ++ unwords other)

-- | @N@, then @N@ lines of integers.
parseSamples :: String -> [[Integer]]
parseSamples text = case lines text of
  header : rest -> map (map read . words) (take (read header) rest)
  []            -> []

-- | One input sample: exactly @n@ raw integers, each in range.
toFixed
  :: forall ai af n . (KnownNat ai, KnownNat af, KnownNat n)
  => [Integer] -> Either String (Vec n (SFixed ai af))
toFixed raws
  | length raws /= natToNum @n = Left ("expected " ++ show (natToNum @n :: Int)
                                       ++ " values per sample, got " ++ show (length raws))
  | any outOfRange raws        = Left ("raw input out of range: " ++ unwords (map show raws))
  | otherwise                  = Right (fmap (\i -> sf (SNat @af) (fromInteger (raws !! fromEnum i))) indicesI)
  where
    outOfRange r = r < toInteger (minBound :: Signed (ai + af))
                || r > toInteger (maxBound :: Signed (ai + af))

failWith :: String -> IO a
failWith message = hPutStrLn stderr message >> exitWith (ExitFailure 1)
